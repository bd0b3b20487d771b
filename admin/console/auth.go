package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/internal/httpserve"
)

const cookieName = "msgx_console"

// session is what the signed cookie holds: the token's name and scope at
// login, until when at most, a random id (the CSRF token is derived from it,
// and the server keeps it until logout or idleness) and the note the
// operator gave for the audit.
type session struct {
	Scope   admin.Scope `json:"s"`
	Expires int64       `json:"e"`
	ID      string      `json:"i"`
	Name    string      `json:"n,omitempty"`
	Note    string      `json:"o,omitempty"`
}

// actor is how the audit names whoever acts through this session: the
// token's name; the note typed at login only beside it.
func (s session) actor() string {
	return admin.Identity{Name: s.Name, Scope: s.Scope}.Actor("console", s.Note)
}

func (c *Console) sign(b []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write(b)
	return m.Sum(nil)
}

// encode signs a session into a cookie value.
func (c *Console) encode(s session) string {
	b, _ := json.Marshal(s)
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(c.sign(b))
}

// decode checks a cookie value's signature (in constant time) and expiry.
func (c *Console) decode(v string) (session, bool) {
	body, sig, ok := strings.Cut(v, ".")
	if !ok {
		return session{}, false
	}
	b, err1 := base64.RawURLEncoding.DecodeString(body)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, c.sign(b)) {
		return session{}, false
	}
	var s session
	if json.Unmarshal(b, &s) != nil || s.ID == "" || s.Scope <= admin.Anonymous || s.Scope > admin.Operator {
		return session{}, false
	}
	if c.clk.Now().Unix() >= s.Expires {
		return session{}, false
	}
	return s, true
}

// sessions are the live sessions on the server: a cookie is a session only
// while its id is here, so that a logout ends it for every copy of the
// cookie, and a session unused for the idle time ends. Bounded: a login
// beyond the bound is refused rather than another session ended.
type sessions struct {
	mu   sync.Mutex
	last map[string]time.Time // id → last use
	max  int
}

// errSessionsFull refuses a login while the bound of live sessions is reached.
var errSessionsFull = errors.New("too many live console sessions")

func (ss *sessions) add(id string, now time.Time, idle time.Duration) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.last) >= ss.max {
		for k, t := range ss.last {
			if now.Sub(t) >= idle {
				delete(ss.last, k)
			}
		}
		if len(ss.last) >= ss.max {
			return errSessionsFull
		}
	}
	ss.last[id] = now
	return nil
}

// use tells whether the session is live, and when touch, restarts its idle
// time.
func (ss *sessions) use(id string, now time.Time, idle time.Duration, touch bool) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	t, ok := ss.last[id]
	if !ok {
		return false
	}
	if now.Sub(t) >= idle {
		delete(ss.last, id)
		return false
	}
	if touch {
		ss.last[id] = now
	}
	return true
}

func (ss *sessions) revoke(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.last, id)
}

// session is the request's session: from its cookie, or an operator's
// without login when the admin has no token (the embedded profile on
// loopback). A page's request restarts the idle time; a fragment's, which
// the page's script fetches by itself, does not.
func (c *Console) session(r *http.Request) (session, bool) {
	if c.adm.OpenAccess() {
		return session{Scope: admin.Operator, ID: "open", Name: admin.OpenAccessName, Expires: c.clk.Now().Add(c.ttl).Unix()}, true
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	s, ok := c.decode(ck.Value)
	if !ok || !c.live.use(s.ID, c.clk.Now(), c.idle, r.Header.Get("X-Console-Fragment") == "") {
		return session{}, false
	}
	return s, true
}

// csrf is the token every form of a session carries: an HMAC of the
// session id, which a page of another origin cannot read.
func (c *Console) csrf(s session) string {
	return hex.EncodeToString(c.sign([]byte("csrf\x00" + s.ID)))
}

func (c *Console) checkCSRF(r *http.Request, s session) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(c.csrf(s))) == 1
}

func (c *Console) loginForm(w http.ResponseWriter, _ *http.Request) {
	c.render(w, http.StatusOK, view{}, loginPage(""))
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !admin.SameSite(r) {
		c.adm.Refused(r, admin.RefusedCrossSite, "a console login from another site")
		c.refuse(w, r, http.StatusForbidden, "a login must come from this console's own page")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	id, err := c.adm.Authenticate(r, strings.TrimSpace(r.PostFormValue("token")), "console")
	var te *admin.ThrottledError
	switch {
	case errors.As(err, &te):
		w.Header().Set("Retry-After", te.RetryAfterSeconds())
		c.render(w, http.StatusTooManyRequests, view{}, loginPage("Too many failed logins from this address: try again in "+te.RetryAfter.Round(time.Second).String()+"."))
		return
	case err != nil:
		c.render(w, http.StatusUnauthorized, view{}, loginPage("That token is not a read or operator token of this service."))
		return
	case id.Name == admin.OpenAccessName:
		// No token is configured: there is nothing to log in to.
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	now := c.clk.Now()
	s := session{Scope: id.Scope, Expires: now.Add(c.ttl).Unix(), ID: hex.EncodeToString(nonce[:]), Name: id.Name,
		Note: strings.TrimSpace(r.PostFormValue("name"))}
	if err := c.live.add(s.ID, now, c.idle); err != nil {
		c.adm.Refused(r, admin.RefusedSessions, "a console login while the bound of live sessions is reached")
		c.render(w, http.StatusServiceUnavailable, view{}, loginPage("The console has too many live sessions: log out elsewhere, or wait for idle ones to end."))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.encode(s), Path: Prefix, MaxAge: int(c.ttl / time.Second),
		HttpOnly: true, Secure: httpserve.Secure(r), SameSite: http.SameSiteStrictMode})
	c.log.Info("console: login", "token", s.Name, "scope", s.Scope.String(), "note", s.Note, "remote", r.RemoteAddr)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logout ends the session on the server, so that a copy of its cookie is
// no session any more, and clears the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s session) {
	c.live.revoke(s.ID)
	c.log.Info("console: logout", "token", s.Name, "remote", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, Secure: httpserve.Secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}
