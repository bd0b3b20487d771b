package app

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
)

// The admin listener takes its named tokens and host names from the
// configuration: a named token authenticates, a request by a configured
// name is served, by another name refused (421).
func TestAdminTokensAndHostsFromTheConfiguration(t *testing.T) {
	const alice = "aL7kW3qZ9xV2nB6mT4cJ8hF1dS5gP0rYe"
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: "sqlite:%s"}
admin:
  listen: "127.0.0.1:0"
  hosts: [msgx-admin.internal]
  tokens: {alice: {scope: read}}
ingress: {listen: ""}
`, filepath.Join(t.TempDir(), "msgx.db")), "MSGX_ADMIN_TOKENS_ALICE_SECRET="+alice)
	a := runApp(t, cfg)
	do := func(host, tok string) int {
		req, err := http.NewRequest("GET", "http://"+a.AdminAddr()+"/v1/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do("msgx-admin.internal:8081", alice); code != 200 {
		t.Errorf("the named token by the configured name: %d", code)
	}
	if code := do(a.AdminAddr(), alice); code != 200 {
		t.Errorf("the named token by address: %d", code)
	}
	if code := do("msgx-admin.internal", ""); code != 401 {
		t.Errorf("no token: %d", code)
	}
	if code := do("rebind.attacker.example", alice); code != http.StatusMisdirectedRequest {
		t.Errorf("another name: %d", code)
	}
}
