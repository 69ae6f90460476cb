// Package promtest reads a Prometheus text exposition (what GET /metrics
// answers) into samples for tests, with the parser of prometheus/common.
package promtest

import (
	"maps"
	"slices"
	"strings"

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
	vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, slices.Collect(maps.Values(families))...)
	if err != nil {
		return nil, err
	}
	out := make(Samples, len(vec))
	for i, s := range vec {
		labels := map[string]string{}
		for k, v := range s.Metric {
			labels[string(k)] = string(v)
		}
		delete(labels, model.MetricNameLabel)
		out[i] = Sample{Name: string(s.Metric[model.MetricNameLabel]), Labels: labels, Value: float64(s.Value)}
	}
	return out, nil
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
