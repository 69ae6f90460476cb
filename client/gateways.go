package client

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// gateways sends each request to the current one of several gateways'
// base URLs, and makes the next one current when a request gets no answer
// or a 502, 503 or 504: the caller's retry (Hold's, for one) goes there.
type gateways struct {
	doer  HttpRequestDoer
	first *url.URL   // the base URL the generated client builds requests on
	bases []*url.URL // first, then Options.OtherURLs
	cur   atomic.Uint32
}

func (g *gateways) Do(req *http.Request) (*http.Response, error) {
	i := g.cur.Load()
	b := g.bases[int(i)%len(g.bases)]
	u := *req.URL
	u.Scheme, u.Host = b.Scheme, b.Host
	u.Path = strings.TrimSuffix(b.Path, "/") + strings.TrimPrefix(req.URL.Path, strings.TrimSuffix(g.first.Path, "/"))
	u.RawPath = "" // names and tokens need no escaping
	req.URL, req.Host = &u, ""
	res, err := g.doer.Do(req)
	if err != nil || res.StatusCode == http.StatusBadGateway || res.StatusCode == http.StatusServiceUnavailable ||
		res.StatusCode == http.StatusGatewayTimeout {
		g.cur.CompareAndSwap(i, i+1)
	}
	return res, err
}
