package httpingress_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
	"github.com/msgx/msgx/source/httpingress"
)

func msg(sndr string, seq int) string {
	return fmt.Sprintf(`<MSG><META><SNDR>%s</SNDR><SEQN>%d</SEQN><TYPE>FLOP</TYPE><STYP>ETA</STYP></META><FLOP><FLID>1</FLID></FLOP></MSG>`, sndr, seq)
}

func (s *setup) stored(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(context.Background(), "SELECT count(*) FROM msgx_inbox WHERE stream = 'sis'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func postAs(t *testing.T, hc *http.Client, url, token, b string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+httpingress.Path, strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/xml")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// By address: a client outside every sender's networks is refused before
// anything is stored; one inside may post its own SNDR only.
func TestSenderByAddress(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newSetup(t, engine, httpingress.WithRegisterer(reg), httpingress.WithSenders(
		httpingress.Sender{Name: "elsewhere", Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, SNDR: []string{"AODB"}}))
	if code := postAs(t, http.DefaultClient, s.srv.URL, "", msg("AODB", 1)); code != http.StatusForbidden {
		t.Fatalf("a client outside the allow-list: %d, want 403", code)
	}
	if n := s.stored(t); n != 0 {
		t.Fatalf("%d messages stored from an unknown client", n)
	}
	s = newSetup(t, engine, httpingress.WithRegisterer(prometheus.NewRegistry()), httpingress.WithSenders(
		httpingress.Sender{Name: "elsewhere", Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, SNDR: []string{"AODB"}},
		httpingress.Sender{Name: "local", Networks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, SNDR: []string{"FIMS"}}))
	if code := postAs(t, http.DefaultClient, s.srv.URL, "", msg("FIMS", 1)); code != http.StatusOK {
		t.Fatalf("its own SNDR: %d", code)
	}
	// The pre-emption of another sender's identity: refused, nothing stored.
	if code := postAs(t, http.DefaultClient, s.srv.URL, "", msg("AODB", 2)); code != http.StatusForbidden {
		t.Fatalf("another sender's SNDR: %d, want 403", code)
	}
	if code := postAs(t, http.DefaultClient, s.srv.URL, "", strings.Replace(msg("FIMS", 3), "</SNDR>", "</SNDR><SNDR>AODB</SNDR>", 1)); code != http.StatusForbidden {
		t.Fatalf("a second SNDR: %d, want 403", code)
	}
	if n := s.stored(t); n != 1 {
		t.Fatalf("%d messages stored, want 1", n)
	}
	if n := refused(t, reg, "unauthenticated"); n != 1 {
		t.Errorf("refused unauthenticated %v", n)
	}
}

// refused is msgx_ingress_refused_total{reason}.
func refused(t *testing.T, g prometheus.Gatherer, reason string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "msgx_ingress_refused_total" && m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no msgx_ingress_refused_total{reason=%q}", reason)
	return 0
}

// By bearer token: none or a wrong one is 401, the right one posts its
// SNDR; a token and a network must both hold when a sender has both.
func TestSenderByToken(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	s := newSetup(t, engine, httpingress.WithSenders(
		httpingress.Sender{Name: "fims", Token: tok, SNDR: []string{"FIMS"}},
		httpingress.Sender{Name: "aodb", Token: "another-token-0123456789abcdef", Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, SNDR: []string{"AODB"}}))
	if code := postAs(t, http.DefaultClient, s.srv.URL, "", msg("FIMS", 1)); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code := postAs(t, http.DefaultClient, s.srv.URL, tok+"x", msg("FIMS", 1)); code != http.StatusForbidden {
		t.Fatalf("a wrong token: %d, want 403", code)
	}
	if code := postAs(t, http.DefaultClient, s.srv.URL, "another-token-0123456789abcdef", msg("AODB", 1)); code != http.StatusForbidden {
		t.Fatalf("the right token from the wrong network: %d, want 403", code)
	}
	if code := postAs(t, http.DefaultClient, s.srv.URL, tok, msg("FIMS", 1)); code != http.StatusOK {
		t.Fatalf("the right token: %d", code)
	}
	if code := postAs(t, http.DefaultClient, s.srv.URL, tok, msg("AODB", 2)); code != http.StatusForbidden {
		t.Fatalf("the right token, another SNDR: %d, want 403", code)
	}
	if n := s.stored(t); n != 1 {
		t.Fatalf("%d stored, want 1", n)
	}
}

// By client certificate (mutual TLS): a verified certificate of a named
// sender posts; no certificate, or one of another name, is refused.
func TestSenderByClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "senders CA")
	server := ca.Server(t, "msgx")
	s := newSetup(t, engine, httpingress.WithSenders(httpingress.Sender{Name: "aodb", CertNames: []string{"aodb.example"}, SNDR: []string{"AODB"}}))
	s.srv.Close()
	tlsSrv := httptest.NewUnstartedServer(s.srv.Config.Handler)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{server.TLS}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}}}
	}
	url := strings.Replace(tlsSrv.URL, "127.0.0.1", "localhost", 1)
	if code := postAs(t, client(), url, "", msg("AODB", 1)); code != http.StatusForbidden {
		t.Fatalf("no certificate: %d, want 403", code)
	}
	if code := postAs(t, client(ca.Client(t, "other.example").TLS), url, "", msg("AODB", 1)); code != http.StatusForbidden {
		t.Fatalf("another name: %d, want 403", code)
	}
	if code := postAs(t, client(ca.Client(t, "aodb.example").TLS), url, "", msg("AODB", 1)); code != http.StatusOK {
		t.Fatalf("the sender's certificate: %d", code)
	}
	if n := s.stored(t); n != 1 {
		t.Fatalf("%d stored, want 1", n)
	}
}

// A sender's max-per-minute caps its posts: beyond, 429 with Retry-After,
// nothing stored; the allowance refills with the clock.
func TestSenderRateCap(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newSetup(t, engine, httpingress.WithRegisterer(reg), httpingress.WithSenders(
		httpingress.Sender{Name: "local", Networks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, SNDR: []string{"AODB"}, MaxPerMinute: 3}))
	for i := range 3 {
		if code := postAs(t, http.DefaultClient, s.srv.URL, "", msg("AODB", i+1)); code != http.StatusOK {
			t.Fatalf("post %d within the cap: %d", i+1, code)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+httpingress.Path, strings.NewReader(msg("AODB", 4)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "20" {
		t.Fatalf("over the cap: %d, Retry-After %q; want 429 and 20 s", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := s.stored(t); n != 3 {
		t.Fatalf("%d stored, want 3", n)
	}
	if n := refused(t, reg, "rate"); n != 1 {
		t.Errorf("refused rate %v", n)
	}
	s.clk.Advance(20 * time.Second)
	if code := postAs(t, http.DefaultClient, s.srv.URL, "", msg("AODB", 4)); code != http.StatusOK {
		t.Fatalf("after a third of a minute: %d", code)
	}
}
