package server

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/go-chi/chi/v5"

	"github.com/redlockd/redlockd"
)

// operation is what validateRequest needs of one operation of openapi.yaml,
// resolved once: its route for openapi3filter, its parameters (the path's
// and the operation's), and its request body and that body's JSON schema,
// if it has one. A string in the path or a header is its raw value
// (percent-decoded in the path), so its schema checks it at once (direct);
// openapi3filter decodes the others.
type operation struct {
	route          *routers.Route
	direct, styled []*openapi3.Parameter
	body           *openapi3.RequestBody // nil: the operation takes no body
	schema         *openapi3.Schema      // body's application/json schema
}

// addParam adds p to the parameters of o.
func (o *operation) addParam(p *openapi3.Parameter) {
	if p.Content == nil && p.Schema != nil && stringOnly(p.Schema.Value) &&
		(p.In == openapi3.ParameterInPath || p.In == openapi3.ParameterInHeader) {
		o.direct = append(o.direct, p)
	} else {
		o.styled = append(o.styled, p)
	}
}

// stringOnly reports whether s says nothing of a string beyond what
// Schema.VisitJSONString checks (its type, lengths, pattern and format): no
// enum and no composition. VisitJSONString then checks exactly what
// VisitJSON would, without boxing the value or the visit's bookkeeping.
func stringOnly(s *openapi3.Schema) bool {
	return s.Type.Is(openapi3.TypeString) && len(s.Enum) == 0 && s.Not == nil &&
		len(s.AllOf) == 0 && len(s.AnyOf) == 0 && len(s.OneOf) == 0
}

// operations are the operations of openapi.yaml by "METHOD /path" (chi's
// route patterns are the spec's paths), loaded and validated once.
var operations = sync.OnceValues(func() (map[string]*operation, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(redlockd.OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, err
	}
	ops := map[string]*operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			o := &operation{route: &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}}
			for _, p := range op.Parameters {
				o.addParam(p.Value)
			}
			for _, p := range item.Parameters { // the path's, unless the operation overrides them
				if op.Parameters.GetByInAndName(p.Value.In, p.Value.Name) == nil {
					o.addParam(p.Value)
				}
			}
			if op.RequestBody != nil {
				o.body = op.RequestBody.Value
				mt := o.body.Content.Get("application/json")
				if mt == nil || mt.Schema == nil {
					return nil, fmt.Errorf("%s %s: the request body has no application/json schema", method, path)
				}
				o.schema = mt.Schema.Value
			}
			ops[method+" "+path] = o
		}
	}
	return ops, nil
})

// mustOperations returns operations; openapi.yaml is embedded and checked
// by the tests, so failing to load it is a build defect.
func mustOperations() map[string]*operation {
	ops, err := operations()
	if err != nil {
		panic(fmt.Sprintf("server: openapi.yaml: %v", err))
	}
	return ops
}

// paramOptions are the options of every parameter validation: the server
// fills in defaults itself, and authenticate has checked keys already.
var paramOptions = &openapi3filter.Options{SkipSettingDefaults: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}

// validateRequest checks a routed request against its operation in
// openapi.yaml, after the generated router has bound its parameters and
// before the generated decoder binds its body: every parameter against its
// schema, and a body (see readJSONBody) against the request body's schema.
// The generated decoder then binds the value validated here.
func (s *Server) validateRequest(ops map[string]*operation) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rctx := chi.RouteContext(r.Context())
			method := r.Method
			if method == http.MethodHead {
				method = http.MethodGet // see routeHead
			}
			if op := ops[method+" "+rctx.RoutePattern()]; op != nil {
				if err := op.validate(r, rctx); err != nil {
					s.writeProblem(w, r, err)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// validate checks r against o, and replaces a body it validated with a
// decodedBody (see readJSONBody). It returns a *requestError.
func (o *operation) validate(r *http.Request, rctx *chi.Context) error {
	for _, p := range o.direct {
		var v string
		if p.In == openapi3.ParameterInPath {
			var err error
			// The generated router percent-decodes path parameters too.
			if v, err = url.PathUnescape(rctx.URLParam(p.Name)); err != nil {
				return &requestError{detail: p.Name + ": not a valid percent-encoded path segment", err: err}
			}
		} else if vs := r.Header.Values(p.Name); len(vs) > 0 {
			v = vs[0] // the generated router refuses more
		} else if p.Required {
			return &requestError{detail: paramDetail(p, openapi3filter.ErrInvalidRequired), err: openapi3filter.ErrInvalidRequired}
		} else {
			continue
		}
		if err := p.Schema.Value.VisitJSONString(v); err != nil {
			return &requestError{detail: paramDetail(p, err), err: err}
		}
	}
	if len(o.styled) > 0 {
		in := &openapi3filter.RequestValidationInput{Request: r, Route: o.route, Options: paramOptions,
			PathParams: make(map[string]string, len(rctx.URLParams.Keys))}
		for i, k := range rctx.URLParams.Keys {
			in.PathParams[k], _ = url.PathUnescape(rctx.URLParams.Values[i])
		}
		for _, p := range o.styled {
			if err := openapi3filter.ValidateParameter(context.Background(), in, p); err != nil {
				return &requestError{detail: paramDetail(p, err), err: err}
			}
		}
	}
	if o.body == nil {
		return nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || o.body.Content.Get(mt) == nil {
			return badRequest("Content-Type must be application/json (curl: use --json, or -H 'Content-Type: application/json')")
		}
	}
	v, ok, err := readJSONBody(r)
	switch {
	case err != nil:
		return err
	case !ok && o.body.Required:
		return badRequest("a JSON body is required")
	case !ok:
		return nil
	}
	if err := o.schema.VisitJSON(v, openapi3.VisitAsRequest()); err != nil {
		return &requestError{detail: schemaDetail("", err), err: err}
	}
	r.Body = decodedBody{plainIntegers(v)}
	return nil
}

// paramDetail describes err, a parameter's validation error, without the
// parameter's value (a Lock-Token's value is a secret).
func paramDetail(p *openapi3.Parameter, err error) string {
	name := p.Name
	if p.In == openapi3.ParameterInHeader {
		name = "the " + name + " header"
	}
	var parse *openapi3filter.ParseError
	switch {
	case errors.Is(err, openapi3filter.ErrInvalidRequired):
		return name + ": is required"
	case errors.Is(err, openapi3filter.ErrInvalidEmptyValue):
		return name + ": must not be empty"
	case errors.As(err, &parse):
		return name + ": " + parse.Reason
	}
	return schemaDetail(name, err)
}

// schemaDetail describes err, a JSON Schema validation error of the value
// at where, naming the member at fault and the rule it breaks, never the
// value (kin-openapi's SchemaError.Error would print it).
func schemaDetail(where string, err error) string {
	var se *openapi3.SchemaError
	if !errors.As(err, &se) {
		return strings.TrimSpace(where + " is not valid")
	}
	path := se.JSONPointer()
	if where != "" {
		path = append([]string{where}, path...)
	}
	at := strings.Join(path, "/")
	if at == "" {
		at = "the body"
	}
	reason := se.Reason
	switch se.SchemaField {
	case "nullable":
		reason = "must not be null: leave the member out for its default"
		if len(path) == 0 {
			reason = "must be a JSON object, not null"
		}
	case "pattern":
		reason = "must match " + se.Schema.Pattern
	case "required":
		reason = "is required"
	case "properties": // additionalProperties: false
		quoted, _ := strings.CutPrefix(strings.TrimSuffix(reason, " is unsupported"), "property ")
		if name, err := strconv.Unquote(quoted); err == nil {
			reason = fmt.Sprintf("unknown member %q", truncate(name, 64))
		}
	}
	if reason == "" {
		reason = "does not match the schema's " + se.SchemaField
	}
	return truncate(at+": "+reason, 300)
}
