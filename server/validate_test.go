package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestRulesFromOpenAPI derives, from openapi.yaml itself, a request that
// breaks each rule of each request body's members and of each query
// parameter (type, minimum, maximum, lengths, pattern, enum, items, unknown
// and missing members), and checks that each is 400 invalid-request, that
// its detail names the member and never holds the value sent, and that none
// reaches the Locker. A rule added to openapi.yaml is enforced, and tested,
// with no other change.
func TestRulesFromOpenAPI(t *testing.T) {
	ops := mustOperations()
	_, h := newHandler(newFake(t), nil) // any Locker call fails the test
	cases := 0
	for key, op := range ops {
		method, path, _ := strings.Cut(key, " ")
		target, headers := ruleTarget(op, path)
		if op.body != nil {
			schema := op.body.Content.Get("application/json").Schema.Value
			valid := map[string]any{}
			for _, name := range schema.Required {
				valid[name] = validValue(t, schema.Properties[name].Value)
			}
			for _, name := range slices.Sorted(func(yield func(string) bool) {
				for n := range schema.Properties {
					if !yield(n) {
						return
					}
				}
			}) {
				for rule, bad := range badValues(schema.Properties[name].Value) {
					body := cloneWith(valid, name, bad)
					checkRule(t, h, request{method: method, target: target, headers: headers, body: body}, name, rule, bad)
					cases++
				}
			}
			if len(schema.Required) > 0 {
				body := cloneWith(valid, schema.Required[0], nil)
				checkRule(t, h, request{method: method, target: target, headers: headers, body: body}, schema.Required[0], "required", nil)
				cases++
			}
			if has := schema.AdditionalProperties.Has; has != nil && !*has {
				body := cloneWith(valid, "no_such_member", 1)
				checkRule(t, h, request{method: method, target: target, headers: headers, body: body}, "no_such_member", "additionalProperties", nil)
				cases++
			}
		}
		for _, p := range op.styled {
			if p.In != openapi3.ParameterInQuery || p.Schema.Value.Type.Is(openapi3.TypeArray) {
				continue // the query's arrays: TestMultiBadInput
			}
			for rule, bad := range badValues(p.Schema.Value) {
				if rule == "type" || rule == "null" {
					continue // a query holds strings: 5 is "5"
				}
				s := fmt.Sprint(bad)
				if b, ok := bad.([]any); ok && len(b) == 1 {
					s = fmt.Sprint(b[0])
				}
				sep := "?"
				if strings.Contains(target, "?") {
					sep = "&"
				}
				checkRule(t, h, request{method: method, target: target + sep + p.Name + "=" + url.QueryEscape(s), headers: headers}, p.Name, rule, nil)
				cases++
			}
		}
	}
	t.Logf("%d requests derived from openapi.yaml", cases)
	if cases < 40 {
		t.Errorf("only %d cases derived from openapi.yaml", cases)
	}
}

// ruleTarget is a valid target of the operation at path, with the headers
// it requires.
func ruleTarget(op *operation, path string) (string, []string) {
	target := strings.NewReplacer("{resource}", "x", "{name}", "x").Replace(path)
	var headers []string
	for _, p := range append(slices.Clone(op.direct), op.styled...) {
		switch {
		case p.In == openapi3.ParameterInHeader && p.Required:
			headers = append(headers, p.Name, tokenA)
		case p.In == openapi3.ParameterInQuery && p.Required:
			target += "?" + p.Name + "=a"
		}
	}
	return target, headers
}

// validValue is a value that s accepts: its example, or its minimum.
func validValue(t *testing.T, s *openapi3.Schema) any {
	t.Helper()
	switch {
	case s.Example != nil:
		return s.Example
	case s.Min != nil:
		return *s.Min
	}
	t.Fatalf("no valid value known for %+v", s)
	return nil
}

// badValues are values that break one rule of s each, by the rule's name.
func badValues(s *openapi3.Schema) map[string]any {
	bad := map[string]any{}
	switch {
	case s.Type.Is(openapi3.TypeString):
		bad["type"] = 5
		if s.MinLength > 0 {
			bad["minLength"] = strings.Repeat("a", int(s.MinLength)-1)
		}
		if s.MaxLength != nil {
			bad["maxLength"] = strings.Repeat("a", int(*s.MaxLength)+1)
		}
		if s.Pattern != "" {
			bad["pattern"] = strings.Repeat("!", max(int(s.MinLength), 3))
		}
		if len(s.Enum) > 0 {
			bad["enum"] = "no-such-value"
		}
	case s.Type.Is(openapi3.TypeInteger):
		bad["type"] = "5"
		bad["fraction"] = 100.5
		if s.Min != nil {
			bad["minimum"] = *s.Min - 1
		}
		if s.Max != nil {
			bad["maximum"] = *s.Max + 1
		}
	case s.Type.Is(openapi3.TypeArray):
		bad["type"] = "a"
		item := fmt.Sprint(s.Items.Value.Example)
		if s.MinItems > 0 {
			bad["minItems"] = []any{}
		}
		if s.MaxItems != nil {
			var many []any
			for i := range int(*s.MaxItems) + 1 {
				many = append(many, fmt.Sprintf("%s-%d", item, i))
			}
			bad["maxItems"] = many
		}
		if s.UniqueItems {
			bad["uniqueItems"] = []any{item, item}
		}
		for rule, v := range badValues(s.Items.Value) {
			if rule != "maxLength" { // would make the body too large for some
				bad["items "+rule] = []any{v}
			}
		}
	}
	bad["null"] = nil
	return bad
}

// cloneWith is the JSON of m with member name set to v (removed if v is nil
// and name is in m; null if it is not).
func cloneWith(m map[string]any, name string, v any) string {
	c := map[string]any{}
	for k, e := range m {
		c[k] = e
	}
	if _, ok := m[name]; ok && v == nil {
		delete(c, name)
	} else {
		c[name] = v
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// checkRule checks the answer to req, which breaks rule of member name with
// value bad.
func checkRule(t *testing.T, h http.Handler, req request, name, rule string, bad any) {
	t.Helper()
	p := checkProblem(t, serve(t, h, req), http.StatusBadRequest, "invalid-request")
	if !strings.Contains(p.Detail, name) {
		t.Errorf("%s %s %s (%s of %s): detail %q does not name %s", req.method, req.target, req.body, rule, name, p.Detail, name)
	}
	if s, ok := bad.(string); ok && len(s) >= 3 && strings.Contains(p.Detail, s) {
		t.Errorf("%s %s (%s of %s): detail %q holds the value sent", req.method, req.target, rule, name, p.Detail)
	}
}

// TestDirectParamsAsVisitJSON: validateRequest checks a path or header
// string with Schema.VisitJSONString where its schema is stringOnly; for
// each such parameter of openapi.yaml, that gives VisitJSON's verdict, and
// the same rule at fault, on a valid value and on a bad one for each rule.
func TestDirectParamsAsVisitJSON(t *testing.T) {
	checked := 0
	for key, op := range mustOperations() {
		for _, p := range op.direct {
			s := p.Schema.Value
			values := []string{validString(s)}
			for _, bad := range badValues(s) {
				if v, ok := bad.(string); ok {
					values = append(values, v)
				}
			}
			for i, v := range values {
				want, got := s.VisitJSON(v), s.VisitJSONString(v)
				if i == 0 && want != nil {
					t.Fatalf("%s %s: the valid value %q fails: %v", key, p.Name, v, want)
				}
				if (want == nil) != (got == nil) || schemaField(want) != schemaField(got) {
					t.Errorf("%s %s %q: VisitJSON: %v; VisitJSONString: %v", key, p.Name, truncate(v, 20), want, got)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no parameter checked directly")
	}
}

// validString is a value that s, a string's schema, accepts.
func validString(s *openapi3.Schema) string {
	if v, ok := s.Example.(string); ok {
		return v
	}
	return tokenA // the parameters without an example are Lock-Tokens
}

func schemaField(err error) string {
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		return se.SchemaField
	}
	return ""
}
