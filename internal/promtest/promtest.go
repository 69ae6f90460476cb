// Package promtest reads a Prometheus text exposition (what GET /metrics
// answers) into samples for tests, with the parser of prometheus/common.
package promtest

import (
	"fmt"
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one line of the exposition: a histogram gives its _bucket
// (label "le"), _sum and _count lines, a summary its quantiles, _sum and
// _count.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples are the lines of one exposition.
type Samples []Sample

// Parse parses text.
func Parse(text string) (Samples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out Samples
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(suffix string, v float64, extra ...string) {
				ls := labels
				if len(extra) == 2 {
					ls = map[string]string{extra[0]: extra[1]}
					for k, v := range labels {
						ls[k] = v
					}
				}
				out = append(out, Sample{Name: name + suffix, Labels: ls, Value: v})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add("", m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add("", m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add("", m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add("_bucket", float64(b.GetCumulativeCount()), "le", formatFloat(b.GetUpperBound()))
				}
				add("_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				add("_sum", h.GetSampleSum())
				add("_count", float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					add("", q.GetValue(), "quantile", formatFloat(q.GetQuantile()))
				}
				add("_sum", s.GetSampleSum())
				add("_count", float64(s.GetSampleCount()))
			default:
				return nil, fmt.Errorf("metric %s: type %v not supported", name, f.GetType())
			}
		}
	}
	return out, nil
}

func formatFloat(f float64) string {
	if math.IsInf(f, +1) {
		return "+Inf"
	}
	return fmt.Sprint(f)
}

// Sum returns the sum of the samples called name whose labels include the
// name=value pairs of labels, and whether there was any.
func (ss Samples) Sum(name string, labels ...string) (float64, bool) {
	sum, found := 0.0, false
next:
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.Labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		sum += s.Value
		found = true
	}
	return sum, found
}
