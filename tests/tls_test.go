package tests

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// ---------------------------------------------------------------------------
// a throwaway certificate authority

// testCA is a certificate authority made for one test. Its certificates are
// for 127.0.0.1 and localhost.
type testCA struct {
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	File   string // the CA certificate, PEM
	Pool   *x509.CertPool
	serial int64
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redlockd test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key, Pool: x509.NewCertPool(), serial: 1}
	ca.Pool.AddCert(cert)
	ca.File = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// issue makes a server certificate for 127.0.0.1 and localhost and returns
// the paths of its PEM certificate and key.
func (ca *testCA) issue(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------
// redis-server with TLS

// startTLSRedis starts a TLS-only redis-server with a certificate of ca.
// With password alone it has requirepass, with user and password an ACL
// user (the default user is then off).
func startTLSRedis(t testing.TB, ca *testCA, user, password string) *RedisNode {
	t.Helper()
	certFile, keyFile := ca.issue(t, "redis")
	return nodesOf(redistest.StartWith(t, redistest.Config{User: user, Password: password,
		TLS: &redistest.TLS{CertFile: certFile, KeyFile: keyFile, CAFile: ca.File}}))[0]
}

// ---------------------------------------------------------------------------
// HTTP with a client of one's own

// doWith sends method url with body (JSON) and header pairs through c.
func doWith(t testing.TB, c *http.Client, method, url, body string, hdr ...string) *Resp {
	t.Helper()
	req, err := newRequest(url, method, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sendWith(c, req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitReadyWith polls url/readyz through c until it answers 200.
func waitReadyWith(t testing.TB, c *http.Client, base string, g *Gateway) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
		r, err := sendWith(c, req)
		if err == nil && r.Status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redlockd not ready within 15s (last: %v, %v):\n%s", r, err, g.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------

// TestTLS: the gateway serves HTTPS with --tls-cert and reaches TLS-only
// redis-servers (rediss://: one open, one with requirepass, one with an ACL
// user and password) verified against --redis-ca-file, or the CA of
// SSL_CERT_FILE; a node whose certificate is not trusted is down
// (docs/operations.md "Topology", Redis settings). Locks go through HTTPS
// and land on every node, plain HTTP to the HTTPS port gets no lock, and
// the passwords show nowhere (docs/operations.md "Security").
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	nodes := []*RedisNode{
		startTLSRedis(t, ca, "", ""),
		startTLSRedis(t, ca, "", "tls-requirepass-Q7w2"),
		startTLSRedis(t, ca, "alice", "tls-aclpass-Z9k4"),
	}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	certFile, keyFile := ca.issue(t, "gateway")
	g := startProcess(t, nil, "serve", "--listen", "127.0.0.1:0", "--restart-quarantine", "off",
		"--redis", strings.Join(urls, ","), "--redis-ca-file", ca.File, "--tls-cert", certFile, "--tls-key", keyFile)
	base := strings.Replace(g.URL, "http://", "https://", 1)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12},
	}}
	waitReadyWith(t, c, base, g)

	res := resourceName(t)
	a := doWith(t, c, http.MethodPost, base+"/locks/"+res, `{"ttl_ms":10000}`)
	wantStatus(t, a, http.StatusCreated)
	tok := a.str(t, "token")
	wantCount(t, a, "locked_nodes", 2, 3)
	waitHolders(t, nodes, res, tok, 3) // every node, whatever its auth
	ready := doWith(t, c, http.MethodGet, base+"/readyz", "")
	wantStatus(t, ready, http.StatusOK)
	if countUp(ready) != 3 {
		t.Errorf("readyz: %s", ready.Body)
	}
	wantStatus(t, doWith(t, c, http.MethodDelete, base+"/locks/"+res, "", "Lock-Token", tok), http.StatusNoContent)

	// Plain HTTP to the HTTPS listener gets no lock.
	plain := doWith(t, &http.Client{Timeout: 10 * time.Second}, http.MethodPost, g.URL+"/locks/"+res, "")
	if plain.Status != http.StatusBadRequest {
		t.Errorf("plain HTTP to the HTTPS port: %d, want 400", plain.Status)
	}

	t.Run("SSL_CERT_FILE", func(t *testing.T) {
		g2 := startProcess(t, []string{"SSL_CERT_FILE=" + ca.File}, "serve", "--listen", "127.0.0.1:0",
			"--restart-quarantine", "off", "--redis", strings.Join(urls, ","))
		g2.waitReady(t)
		res := resourceName(t)
		waitHolders(t, nodes, res, lock(t, g2, res, "").str(t, "token"), 3) // every node trusts the CA
		g2.Stop()
		checkNoSecrets(t, g2.Stderr(), "stderr", nodes[1].Password, nodes[2].Password)
	})

	t.Run("untrusted", func(t *testing.T) {
		g3 := startProcess(t, []string{"SSL_CERT_FILE=" + filepath.Join(t.TempDir(), "none.pem")}, "serve",
			"--listen", "127.0.0.1:0", "--restart-quarantine", "off", "--redis", strings.Join(urls, ","))
		var r *Resp
		eventually(t, 10*time.Second, "/readyz shows every node down", func() bool {
			r = g3.do(t, http.MethodGet, "/readyz", "")
			return r.Status == http.StatusServiceUnavailable && countUp(r) == 0
		})
		wantProblem(t, acquire(t, g3, resourceName(t), ""), http.StatusServiceUnavailable, "quorum-unavailable")
		g3.Stop()
		checkNoSecrets(t, g3.Stderr()+string(r.Body), "stderr and /readyz", nodes[1].Password, nodes[2].Password)
	})

	t.Run("waiters", func(t *testing.T) { tlsWaiters(t, c, base) })

	g.Stop()
	checkNoSecrets(t, g.Stderr(), "stderr", nodes[1].Password, nodes[2].Password)
}

// tlsWaiters queues three waiting acquires behind a held lock over TLS,
// over HTTP/1.1, HTTP/2 and HTTP/1.1. Each gets the lock in turn, and the
// last one's connection then serves its release.
func tlsWaiters(t *testing.T, c *http.Client, base string) {
	tlsConf := c.Transport.(*http.Transport).TLSClientConfig
	// (Each client its own copy: a Transport adds "h2" to its config's NextProtos.)
	h2 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf.Clone(), ForceAttemptHTTP2: true}}
	h1 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf.Clone()}}
	waiters := func() float64 {
		r := doWith(t, c, http.MethodGet, base+"/metrics", "")
		return parseMetrics(t, string(r.Body)).value("redlockd_waiters")
	}
	res := resourceName(t)
	hold := doWith(t, c, http.MethodPost, base+"/locks/"+res, `{"ttl_ms":10000}`)
	wantStatus(t, hold, http.StatusCreated)

	type got struct {
		r     *http.Response
		token string
		err   error
	}
	results := make([]chan got, 3)
	for i, cl := range []*http.Client{c, h2, h1} {
		results[i] = make(chan got, 1)
		go func() {
			resp, err := cl.Post(base+"/locks/"+res, "application/json", strings.NewReader(`{"ttl_ms":10000,"wait_ms":20000}`))
			if err != nil {
				results[i] <- got{err: err}
				return
			}
			var body struct{ Token string }
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			results[i] <- got{resp, body.Token, err}
		}()
		eventually(t, 10*time.Second, "the waiter queued", func() bool { return waiters() == float64(i+1) })
	}
	tok := hold.str(t, "token")
	for i, proto := range []int{1, 2, 1} {
		wantStatus(t, doWith(t, c, http.MethodDelete, base+"/locks/"+res, "", "Lock-Token", tok), http.StatusNoContent)
		g := <-results[i]
		if g.err != nil || g.r.StatusCode != http.StatusCreated || g.r.ProtoMajor != proto || g.token == "" {
			t.Fatalf("waiter %d: %v, %+v", i, g.err, g.r)
		}
		tok = g.token
	}
	// The last waiter's connection is the one h1 has: its release reuses it.
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodDelete, base+"/locks/"+res, nil)
	req.Header.Set("Lock-Token", tok)
	resp, err := h1.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent || !reused {
		t.Fatalf("release on the waiter's connection: %v, %+v, reused %v", err, resp, reused)
	}
	resp.Body.Close()
}

// checkNoSecrets fails if any secret appears in s (what).
func checkNoSecrets(t testing.TB, s, what string, secrets ...string) {
	t.Helper()
	for _, secret := range secrets {
		if secret != "" && strings.Contains(s, secret) {
			t.Errorf("secret %.6s… appears in %s", secret, what)
		}
	}
}
