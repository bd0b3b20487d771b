package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/internal/httpserve"
)

const cookieName = "msgx_console"

// session is what the signed cookie holds: the scope the token had at
// login, until when, a random id (the CSRF token is derived from it) and the
// name the operator gave for the audit.
type session struct {
	Scope   admin.Scope `json:"s"`
	Expires int64       `json:"e"`
	ID      string      `json:"i"`
	Name    string      `json:"n,omitempty"`
}

// actor is how the audit names whoever acts through this session.
func (s session) actor() string {
	name := s.Name
	if name == "" {
		name = "console"
	}
	return name + " (" + s.Scope.String() + " token, console)"
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

// session is the request's session: from its cookie, or an operator's
// without login when the admin has no token (the embedded profile).
func (c *Console) session(r *http.Request) (session, bool) {
	if c.adm.OpenAccess() {
		return session{Scope: admin.Operator, ID: "open", Expires: c.clk.Now().Add(c.ttl).Unix()}, true
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	return c.decode(ck.Value)
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

// sameOrigin refuses a login posted from another site. A browser sends
// Sec-Fetch-Site with every request (older ones at least Origin).
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		c.render(w, r, http.StatusOK, "login", session{}, map[string]any{})
		return
	}
	if !sameOrigin(r) {
		c.refuse(w, r, http.StatusForbidden, "a login must come from this console's own page")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	scope := c.adm.TokenScope(tok)
	if scope == admin.Anonymous || tok == "" {
		c.log.Warn("console: login refused: unknown token", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", session{}, map[string]any{"Error": "That token is not a read or operator token of this service."})
		return
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	name := strings.TrimSpace(r.PostFormValue("name"))
	if len(name) > 60 {
		name = name[:60]
	}
	s := session{Scope: scope, Expires: c.clk.Now().Add(c.ttl).Unix(), ID: hex.EncodeToString(nonce[:]), Name: strings.ToValidUTF8(name, "?")}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.encode(s), Path: Prefix, MaxAge: int(c.ttl / time.Second),
		HttpOnly: true, Secure: httpserve.Secure(r), SameSite: http.SameSiteStrictMode})
	c.log.Info("console: login", "scope", scope.String(), "name", s.Name, "remote", r.RemoteAddr)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ session) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, Secure: httpserve.Secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}
