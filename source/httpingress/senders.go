package httpingress

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/xml"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/msgx/msgx/internal/httpserve"
)

// Sender is a client allowed to post, and the SNDR values its messages may
// claim. A request is the sender's when every check the sender has passes:
// its address is in Networks, it carries Token as a bearer token, its
// verified client certificate names one of CertNames (the common name or a
// DNS name). A sender has at least one check.
type Sender struct {
	Name string
	// Networks are the client addresses (behind a trusted proxy, the
	// forwarded address; see httpserve.ClientAddr).
	Networks []netip.Prefix
	// Token is the bearer token the sender sends (Authorization: Bearer).
	Token string
	// CertNames are names of the sender's client certificate, verified by
	// the listener's TLS against its client CAs.
	CertNames []string
	// SNDR are the META/SNDR values the sender's messages may claim: the
	// first part of the business identity (SNDR|TYPE|STYP|SEQN), so a
	// sender cannot take another's identities.
	SNDR []string
	// MaxPerMinute caps the messages the sender may post a minute (a
	// bucket of that many, refilled evenly); beyond, 429 with Retry-After.
	// 0: no cap.
	MaxPerMinute int
}

// WithSenders authenticates every request as one of senders (default: none,
// every client may post any message — only on a trusted network; the
// service's production profile refuses it unless told it is meant).
func WithSenders(senders ...Sender) Option {
	return func(o *options) {
		o.senders = nil
		for _, s := range senders {
			o.senders = append(o.senders, sender{Sender: s, token: sha256.Sum256([]byte(s.Token))})
		}
	}
}

type sender struct {
	Sender
	token [sha256.Size]byte
	// bucket holds the sender's allowance (nil: no cap); New makes it.
	bucket *bucket
}

// bucket is a token bucket of MaxPerMinute tokens, refilled evenly over a
// minute of the handler's clock.
type bucket struct {
	mu     sync.Mutex
	size   float64
	tokens float64
	last   time.Time
}

// take takes a token, or says how long until one is there.
func (b *bucket) take(now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(b.size, b.tokens+elapsed.Minutes()*b.size)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.size * float64(time.Minute))
}

// admit takes a token from the first of senders that has one (or no cap);
// otherwise it says when to come back.
func (h *Handler) admit(senders []*sender) (bool, time.Duration) {
	now := h.o.clock.Now()
	wait := time.Duration(-1)
	for _, s := range senders {
		if s.bucket == nil {
			return true, 0
		}
		ok, d := s.bucket.take(now)
		if ok {
			return true, 0
		}
		if wait < 0 || d < wait {
			wait = d
		}
	}
	return false, wait
}

// Refusal reasons of msgx_ingress_refused_total.
const (
	refusedUnauthenticated = "unauthenticated"
	refusedSNDR            = "sndr"
	refusedRate            = "rate"
)

// authenticate returns the senders r qualifies as (nil: none), and whether
// a bearer token was given.
func (h *Handler) authenticate(r *http.Request) ([]*sender, bool) {
	addr := httpserve.ClientAddr(r)
	tok, hasToken := bearer(r)
	tokSum := sha256.Sum256([]byte(tok))
	var certNames []string
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		certNames = append([]string{leaf.Subject.CommonName}, leaf.DNSNames...)
	}
	var out []*sender
	for i := range h.o.senders {
		s := &h.o.senders[i]
		if len(s.Networks) > 0 && !slices.ContainsFunc(s.Networks, func(p netip.Prefix) bool { return p.Contains(addr) }) {
			continue
		}
		// Compared as hashes, in constant time: the time taken says
		// nothing about how much of a token was right.
		if s.Token != "" && (!hasToken || subtle.ConstantTimeCompare(tokSum[:], s.token[:]) != 1) {
			continue
		}
		if len(s.CertNames) > 0 && !slices.ContainsFunc(certNames, func(n string) bool { return n != "" && slices.Contains(s.CertNames, n) }) {
			continue
		}
		out = append(out, s)
	}
	return out, hasToken
}

func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// mayClaim reports whether one of senders may claim sndr.
func mayClaim(senders []*sender, sndr string) bool {
	for _, s := range senders {
		if slices.Contains(s.SNDR, sndr) {
			return true
		}
	}
	return false
}

// claimedSenders returns the META/SNDR values a message claims, read as the
// SIS codec reads them: every <SNDR> child of every <META> child of the root
// <MSG>, its text pieces joined and XML white space trimmed. It stops at
// the end of the root element or at the first error: a message that is not
// well-formed up to there is no message the codec decodes, and it claims
// no identity.
func claimedSenders(doc []byte) []string {
	d := xml.NewDecoder(bytes.NewReader(doc))
	// The text is UTF-8 whatever its declaration says (toUTF8).
	d.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
	var (
		path   []string
		text   strings.Builder
		claims []string
	)
	for {
		tok, err := d.Token()
		if err != nil {
			return claims
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			path = append(path, tok.Name.Local)
			if len(path) == 1 && tok.Name.Local != "MSG" {
				return nil
			}
			if len(path) == 3 {
				text.Reset()
			}
		case xml.CharData:
			if len(path) == 3 {
				text.Write(tok)
			}
		case xml.EndElement:
			if len(path) == 3 && path[1] == "META" && path[2] == "SNDR" {
				claims = append(claims, strings.Trim(text.String(), " \t\r\n"))
			}
			path = path[:len(path)-1]
			if len(path) == 0 {
				return claims
			}
		}
	}
}
