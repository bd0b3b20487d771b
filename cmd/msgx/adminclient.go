package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// client talks to a running service's admin API.
type client struct {
	base  string
	token string
	json  bool
	http  *http.Client
}

// clientFlags adds the connection flags to an admin command.
func clientFlags(cmd *cobra.Command) *client {
	c := &client{http: &http.Client{Timeout: 2 * time.Minute}}
	def := os.Getenv("MSGX_ADMIN_URL")
	if def == "" {
		def = "http://127.0.0.1:8081"
	}
	cmd.PersistentFlags().StringVar(&c.base, "admin", def, "admin API address (env MSGX_ADMIN_URL)")
	cmd.PersistentFlags().StringVar(&c.token, "token", "", "bearer token (default: env MSGX_ADMIN_TOKEN)")
	cmd.PersistentFlags().BoolVar(&c.json, "json", false, "print the API's JSON instead of a table")
	return c
}

// call sends a request and decodes a 200 answer into out.
func (c *client) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u := strings.TrimRight(c.base, "/") + path
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	tok := c.token
	if tok == "" {
		tok = os.Getenv("MSGX_ADMIN_TOKEN")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if who := os.Getenv("USER"); who != "" {
		req.Header.Set("X-Msgx-Actor", who)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var p struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &p) == nil && p.Error != "" {
			return fmt.Errorf("admin API: %s: %s", resp.Status, p.Error)
		}
		return fmt.Errorf("admin API: %s", resp.Status)
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = data
		return nil
	}
	return json.Unmarshal(data, out)
}

// printJSON prints v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func ago(sec float64) string {
	if sec <= 0 {
		return "-"
	}
	return (time.Duration(sec * float64(time.Second))).Round(time.Second).String()
}

func orDash[T comparable](v T) string {
	var zero T
	if v == zero {
		return "-"
	}
	return fmt.Sprint(v)
}
