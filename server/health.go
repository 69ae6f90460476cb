package server

import (
	"bytes"
	"context"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd"
	"github.com/redlockd/redlockd/api"
)

// GetHealthz is the liveness probe: always 200.
func (s *Server) GetHealthz(ctx context.Context, _ api.GetHealthzRequestObject) (api.GetHealthzResponseObject, error) {
	return api.GetHealthz200JSONResponse{Body: api.HealthResponse{Status: api.HealthResponseStatusOk},
		Headers: api.GetHealthz200ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// GetReadyz is the readiness probe: 200 when a quorum of nodes is up (their
// health check, which includes a write, succeeded) and out of quarantine and
// the server is not shutting down, else 503. The body shows every node's
// address, never its credentials, and why a node is down; with API keys,
// only to a request with a valid key (the others get an empty list).
func (s *Server) GetReadyz(ctx context.Context, _ api.GetReadyzRequestObject) (api.GetReadyzResponseObject, error) {
	nodes := s.cfg.Locker.Status(ctx)
	body := api.ReadyResponse{
		Status: api.ReadyResponseStatusReady,
		Quorum: s.cfg.Locker.Quorum(),
		Nodes:  make([]api.NodeStatus, 0, len(nodes)),
	}
	now := time.Now()
	voting := 0
	shown := s.authenticated(ctx) // the node list, for a valid key only
	for _, n := range nodes {
		ns := api.NodeStatus{
			Addr:      n.Addr,
			Up:        n.Up,
			Slow:      n.Slow,
			LatencyMs: math.Round(float64(n.Latency)/float64(time.Millisecond)*1000) / 1000,
			// Why the node votes or not: redlock's words, with no credentials.
			Quarantine: n.Quarantine,
		}
		if !n.Up && n.Err != "" {
			ns.Err = &n.Err // redlock's short description: no credentials, no token
		}
		quarantined := n.QuarantinedUntil.After(now)
		if quarantined {
			ns.QuarantinedUntil = new(n.QuarantinedUntil.UTC().Format(timeLayout))
		}
		if n.Up && !quarantined {
			voting++
		}
		if shown {
			body.Nodes = append(body.Nodes, ns)
		}
	}
	if s.drain.Err() == nil {
		s.noteReady(ctx, voting, body.Quorum)
	}
	if voting < body.Quorum || s.drain.Err() != nil {
		body.Status = api.ReadyResponseStatusUnready
		setOutcome(ctx, outcomeUnready)
		return api.GetReadyz503JSONResponse{Body: body, Headers: api.GetReadyz503ResponseHeaders{XRequestId: requestID(ctx)}}, nil
	}
	setOutcome(ctx, "ready")
	return api.GetReadyz200JSONResponse{Body: body, Headers: api.GetReadyz200ResponseHeaders{XRequestId: requestID(ctx)}}, nil
}

// noteReady logs when /readyz's answer changes for want of a quorum of
// voting nodes: a warning when it turns unready, info when it is ready again.
// Probes repeat the answer, so their access lines stay at info level (see
// outcomeUnready); a shutdown is logged where it starts.
func (s *Server) noteReady(ctx context.Context, voting, quorum int) {
	unready := voting < quorum
	if s.unready.Swap(unready) == unready {
		return
	}
	level, msg := zerolog.InfoLevel, "ready: a quorum of nodes is up and out of quarantine"
	if unready {
		level, msg = zerolog.WarnLevel, "unready: fewer than a quorum of nodes are up and out of quarantine; /readyz answers 503 and locks cannot be granted"
	}
	s.logEvent(reqInfoOf(ctx), level).Int("voting", voting).Int("quorum", quorum).Msg(msg)
}

// GetOpenAPI serves the OpenAPI document the server was generated from.
func (s *Server) GetOpenAPI(ctx context.Context, _ api.GetOpenAPIRequestObject) (api.GetOpenAPIResponseObject, error) {
	return api.GetOpenAPI200ApplicationyamlResponse{
		Headers:       api.GetOpenAPI200ResponseHeaders{XRequestId: requestID(ctx)},
		Body:          bytes.NewReader(redlockd.OpenAPI),
		ContentLength: int64(len(redlockd.OpenAPI)),
	}, nil
}
