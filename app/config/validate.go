package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/msgx/msgx/broker/brokers"
)

// validate returns every problem of a defaulted configuration, in key order.
func (c *Config) validate() []string {
	var p problems
	if c.Profile != Embedded && c.Profile != Production {
		p.addf("profile", "%q is not a profile (embedded or production)", c.Profile)
	}
	prod := c.Profile == Production
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		p.addf("log.level", "%q is not a level (debug, info, warn or error)", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		p.addf("log.format", "%q is not a format (text or json)", c.Log.Format)
	}
	sqlite := strings.HasPrefix(c.Store.DSN, "sqlite:")
	switch {
	case c.Store.DSN == "":
		p.addf("store.dsn", "missing (postgres://… or sqlite:PATH)")
	case !sqlite && !strings.HasPrefix(c.Store.DSN, "postgres://") && !strings.HasPrefix(c.Store.DSN, "postgresql://"):
		p.addf("store.dsn", "must start with postgres:// or sqlite:")
	case sqlite && prod:
		p.addf("store.dsn", "SQLite is refused in the production profile: it holds one process's state on one disk; use PostgreSQL")
	}
	if c.Store.MaxConns < 0 {
		p.addf("store.max-conns", "must not be negative")
	}
	if c.Store.StartTimeout < 0 {
		p.addf("store.start-timeout", "must not be negative")
	}
	switch {
	case c.InstanceID == "":
		p.addf("instance-id", "missing and the host name is unknown: set %s", EnvName("instance-id"))
	case len(c.InstanceID) > 200:
		p.addf("instance-id", "at most 200 characters")
	case strings.IndexFunc(c.InstanceID, func(r rune) bool { return r > 0x7f || !idChar(byte(r)) }) >= 0:
		p.addf("instance-id", "%q: only letters, digits, '.', '_' and '-' (Kafka's rule for group instance ids)", c.InstanceID)
	}
	if c.ShutdownTimeout <= 0 {
		p.addf("shutdown-timeout", "must be positive")
	}

	c.validateAdmin(&p, prod)
	validateListener(&p, "admin", c.Admin.Listen, c.Admin.TLS, c.Admin.TrustedProxies, c.Admin.Limits, prod)
	if c.Admin.TLS.ClientCAFile != "" {
		p.addf("admin.tls.client-ca-file", "the admin listener takes no client certificates (its clients have tokens)")
	}

	for _, name := range slices.Sorted(maps.Keys(c.Brokers)) {
		c.validateBroker(&p, name, c.Brokers[name], prod)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Mailboxes)) {
		c.validateMailbox(&p, name, c.Mailboxes[name], prod)
	}
	subs := map[[3]string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Streams)) {
		c.validateStream(&p, name, c.Streams[name])
		for _, sn := range slices.Sorted(maps.Keys(c.Streams[name].Sources)) {
			src, key := c.Streams[name].Sources[sn], "streams."+name+".sources."+sn
			if src.Kind != SourceBroker || src.Topic == "" || src.Group == "" {
				continue
			}
			id := [3]string{src.Broker, src.Topic, src.Group}
			if other, ok := subs[id]; ok {
				p.addf(key, "consumes the same broker, topic and group as %s: the two would share the messages", other)
			} else {
				subs[id] = key
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Pipelines)) {
		pl := c.Pipelines[name]
		if pl.Broker != "" {
			if _, ok := c.Brokers[pl.Broker]; !ok {
				p.addf("pipelines."+name+".broker", "no broker named %q (brokers: %s)", pl.Broker, list(c.Brokers))
			}
		}
	}
	c.validateRelay(&p)

	if c.Ingress.Listen != "" {
		checkListen(&p, "ingress.listen", c.Ingress.Listen)
		switch s, ok := c.Streams[c.Ingress.Stream]; {
		case c.Shadow:
			p.addf("ingress.listen", "shadow mode takes no HTTP ingress: the ingress writes the shared mailbox; leave ingress.listen empty")
		case c.Ingress.Stream == "":
			p.addf("ingress.stream", "missing: name the stream whose mailbox receives POST /cminmsgs/send")
		case !ok:
			p.addf("ingress.stream", "no stream named %q (streams: %s)", c.Ingress.Stream, list(c.Streams))
		case s.Mailbox == "":
			p.addf("ingress.stream", "stream %q has no mailbox to store the messages in", c.Ingress.Stream)
		}
	}
	validateListener(&p, "ingress", c.Ingress.Listen, c.Ingress.TLS, c.Ingress.TrustedProxies, c.Ingress.Limits, prod)
	c.validateSenders(&p, prod)
	if c.Ingress.MaxBytes < 1 {
		p.addf("ingress.max-bytes", "must be positive")
	}
	if c.Ingress.Timeout <= 0 {
		p.addf("ingress.timeout", "must be positive")
	}
	if c.Tracing.ServiceName == "" {
		p.addf("tracing.service-name", "must not be empty")
	}
	return p
}

// validateListener checks a listener's TLS, proxies and limits; the
// production profile refuses a non-loopback listener that neither serves
// TLS nor sits behind a trusted TLS proxy: its tokens, cookies and messages
// would cross the network in clear.
func validateListener(p *problems, key, listen string, t ListenerTLS, proxies []string, l HTTPLimits, prod bool) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.addf(key+".tls", "cert-file and key-file go together (the server certificate and its key)")
	}
	for _, f := range []struct{ k, path string }{{"cert-file", t.CertFile}, {"key-file", t.KeyFile}, {"client-ca-file", t.ClientCAFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			p.addf(key+".tls."+f.k, "cannot read %s: %v", f.path, errors.Unwrap(err))
		}
	}
	if t.ClientCAFile != "" && t.CertFile == "" {
		p.addf(key+".tls.client-ca-file", "client certificates need TLS: set cert-file and key-file too")
	}
	if _, err := ParsePrefixes(proxies); err != nil {
		p.addf(key+".trusted-proxies", "%v", err)
	}
	if t.On() && len(proxies) > 0 {
		p.addf(key+".trusted-proxies", "set either tls (msgx terminates TLS) or trusted-proxies (a proxy in front does), not both")
	}
	if prod && listen != "" && !loopback(listen) && !t.On() && len(proxies) == 0 {
		p.addf(key+".listen", "the production profile refuses %s on a non-loopback address over plain HTTP: set %s.tls.cert-file and key-file, or %s.trusted-proxies when a TLS proxy in front terminates TLS", listen, key, key)
	}
	for _, d := range []struct {
		k string
		v Duration
	}{{"read-header-timeout", l.ReadHeaderTimeout}, {"read-timeout", l.ReadTimeout}, {"write-timeout", l.WriteTimeout}, {"idle-timeout", l.IdleTimeout}} {
		if d.v <= 0 {
			p.addf(key+".limits."+d.k, "must be positive")
		}
	}
	if l.MinBodyRate < 0 {
		p.addf(key+".limits.min-body-rate", "must not be negative (0 is off)")
	}
	if l.MaxConnsPerClient < 0 {
		p.addf(key+".limits.max-conns-per-client", "must not be negative (0 is no limit)")
	}
}

// loopback reports whether a listen address can only be reached from this
// host.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// ParsePrefixes reads addresses, each a CIDR prefix or a single address.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if pfx, err := netip.ParsePrefix(s); err == nil {
			out = append(out, pfx.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

func (c *Config) validateSenders(p *problems, prod bool) {
	in := c.Ingress
	if in.Open && len(in.Senders) > 0 {
		p.addf("ingress.open", "set either open or senders: with senders, only they may post")
	}
	if prod && in.Listen != "" && !in.Open && len(in.Senders) == 0 {
		p.addf("ingress.senders", "the production profile refuses an ingress anyone who reaches it may write to: configure senders (addresses, token or cert-names, and the sndr each may claim), or set ingress.open: true if that is meant")
	}
	for _, name := range slices.Sorted(maps.Keys(in.Senders)) {
		s, key := in.Senders[name], "ingress.senders."+name
		if len(s.Addresses) == 0 && s.Token == "" && len(s.CertNames) == 0 {
			p.addf(key, "needs addresses, a token or cert-names: something that tells this sender from anyone else")
		}
		if _, err := ParsePrefixes(s.Addresses); err != nil {
			p.addf(key+".addresses", "%v", err)
		}
		if s.Token != "" && len(s.Token) < 16 {
			p.addf(key+".token", "a token must have at least 16 characters")
		}
		if len(s.CertNames) > 0 && in.TLS.ClientCAFile == "" {
			p.addf(key+".cert-names", "client certificates need ingress.tls.client-ca-file (the CAs that sign them)")
		}
		if s.MaxPerMinute < 0 {
			p.addf(key+".max-per-minute", "must not be negative (0 is no cap)")
		}
		if len(s.SNDR) == 0 {
			p.addf(key+".sndr", "missing: the META/SNDR values this sender's messages may claim")
		}
	}
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(in.Senders)) {
		if tok := in.Senders[name].Token; tok != "" {
			if other, ok := seen[tok]; ok {
				p.addf("ingress.senders."+name+".token", "the same as %s's: each sender needs its own", other)
			}
			seen[tok] = name
		}
	}
}

// validateBroker runs the checks of the broker's adapter (a kind missing or
// unknown was reported when the blocks were decoded).
func (c *Config) validateBroker(p *problems, name string, b Broker, prod bool) {
	if b.Settings == nil {
		return
	}
	chk := &brokers.Check{Production: prod, Prefix: "brokers." + name, EnvName: EnvName}
	b.Settings.Validate(chk)
	*p = append(*p, chk.Problems...)
}

func (c *Config) validateMailbox(p *problems, name string, m Mailbox, prod bool) {
	key := "mailboxes." + name
	switch m.Kind {
	case MailboxMySQL:
		if m.DSN == "" {
			p.addf(key+".dsn", "missing: user:password@tcp(host:3306)/database")
		}
	case MailboxStore:
		if m.DSN != "" {
			p.addf(key+".dsn", "a store mailbox lives in store.dsn; leave dsn empty")
		}
	case "":
		p.addf(key+".kind", "missing (mysql or store)")
	default:
		p.addf(key+".kind", "%q is not a mailbox kind (mysql or store)", m.Kind)
	}
	if !tableRE.MatchString(m.Table) {
		p.addf(key+".table", "%q is not a table name", m.Table)
	}
	if len(m.ProcessedValue) > 20 {
		p.addf(key+".processed-value", "at most 20 characters (CMINMSGS_STATUS is varchar(20))")
	}
	if m.Start == "" {
		if prod && m.Shared != nil && *m.Shared {
			p.addf(key+".start", "the production profile wants an explicit start position for a shared mailbox (from-now, from-id:N or from-beginning): a wrong guess re-processes or skips the legacy system's messages")
		}
	} else if _, err := ParseStart(m.Start); err != nil {
		p.addf(key+".start", "%v", err)
	}
	if m.PollInterval <= 0 {
		p.addf(key+".poll-interval", "must be positive")
	}
	if m.ClaimBatch < 1 {
		p.addf(key+".claim-batch", "must be at least 1")
	}
	if m.ScansPerCommit < 1 {
		p.addf(key+".scans-per-commit", "must be at least 1")
	}
	if m.MaxCommitDelay <= 0 {
		p.addf(key+".max-commit-delay", "must be positive")
	}
	if m.LateRows != LateRowsRefuse && m.LateRows != LateRowsProcess {
		p.addf(key+".late-rows", "%q is neither %s nor %s", m.LateRows, LateRowsRefuse, LateRowsProcess)
	}
	if m.UnreadableAfter <= 0 {
		p.addf(key+".unreadable-after", "must be positive")
	}
}

func (c *Config) validateStream(p *problems, name string, s Stream) {
	key := "streams." + name
	if s.Processor == "" {
		p.addf(key+".processor", "missing: the name of a processor of this build")
	}
	if s.Mailbox != "" {
		if _, ok := c.Mailboxes[s.Mailbox]; !ok {
			p.addf(key+".mailbox", "no mailbox named %q (mailboxes: %s)", s.Mailbox, list(c.Mailboxes))
		}
	}
	if s.GroupSize < 1 || s.GroupSize > 64 {
		p.addf(key+".group-size", "must be 1 to 64 (the savepoints of a batch stay in PostgreSQL's subtransaction cache)")
	}
	if s.MaxAttempts < 1 {
		p.addf(key+".max-attempts", "must be at least 1")
	}
	if s.Backoff.Initial <= 0 || s.Backoff.Max < s.Backoff.Initial {
		p.addf(key+".backoff", "initial must be positive and max at least initial")
	}
	for _, d := range []struct {
		k string
		v Duration
	}{{"head-deadline", s.HeadDeadline}, {"poll-interval", s.PollInterval}, {"lease", s.Lease},
		{"backfill-every", s.BackfillEvery}, {"overdue-backfill", s.OverdueBackfill}} {
		if d.v <= 0 {
			p.addf(key+"."+d.k, "must be positive")
		}
	}
	if s.ArchiveAfter < 0 {
		p.addf(key+".archive-after", "must not be negative (0 is off)")
	}
	if s.BackfillBatch < 1 {
		p.addf(key+".backfill-batch", "must be at least 1")
	}
	for _, sn := range slices.Sorted(maps.Keys(s.Sources)) {
		c.validateSource(p, key+".sources."+sn, s.Sources[sn])
	}
}

func (c *Config) validateSource(p *problems, key string, s Source) {
	switch s.Kind {
	case SourceBroker:
	case "":
		p.addf(key+".kind", "missing (broker)")
		return
	default:
		p.addf(key+".kind", "%q is not a source kind (broker)", s.Kind)
		return
	}
	if c.Shadow {
		p.addf(key, "shadow mode takes no broker source: its consumer group would take the messages from the production consumers")
	}
	if s.Broker == "" {
		p.addf(key+".broker", "missing: the name of an entry of brokers")
	} else if _, ok := c.Brokers[s.Broker]; !ok {
		p.addf(key+".broker", "no broker named %q (brokers: %s)", s.Broker, list(c.Brokers))
	}
	if s.Topic == "" {
		p.addf(key+".topic", "missing: the topic (queue, subject) to consume")
	}
	if s.Group == "" {
		p.addf(key+".group", "missing: the consumer group; it decides which messages count as consumed, so name it explicitly")
	}
	if s.MaxBytes < 1 {
		p.addf(key+".max-bytes", "must be positive")
	}
}

func (c *Config) validateRelay(p *problems) {
	r := c.Relay
	switch c.Outbox.Mode {
	case "", "table":
	case "wal":
		if !strings.HasPrefix(c.Store.DSN, "postgres://") && !strings.HasPrefix(c.Store.DSN, "postgresql://") {
			p.addf("outbox.mode", "wal needs a PostgreSQL store (store.dsn postgres://…)")
		}
	default:
		p.addf("outbox.mode", "%q is not a mode (table or wal)", c.Outbox.Mode)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Targets)) {
		t := r.Targets[name]
		key := "relay.targets." + name
		if _, ok := c.Brokers[t.Broker]; !ok {
			p.addf(key+".broker", "no broker named %q (brokers: %s)", t.Broker, list(c.Brokers))
		}
		if !slices.Contains([]string{"unordered", "per-key", "compacted"}, t.Lane) {
			p.addf(key+".lane", "%q is not a lane (unordered, per-key or compacted)", t.Lane)
		}
		if t.Batch < 1 || t.Workers < 1 || t.FlushLimit < 1 || t.FlushPeriod <= 0 {
			p.addf(key, "batch, workers, flush-limit and flush-period must be positive")
		}
	}
	if r.MaxAttempts < 1 {
		p.addf("relay.max-attempts", "must be at least 1")
	}
	if r.Backoff.Initial <= 0 || r.Backoff.Max < r.Backoff.Initial {
		p.addf("relay.backoff", "initial must be positive and max at least initial")
	}
	if r.PublishTimeout <= 0 || r.PollInterval <= 0 || r.Retention <= 0 {
		p.addf("relay", "publish-timeout, poll-interval and retention must be positive")
	}
	// outbox.NewRelay's rule: the lease outlives a publish and two database
	// statements (15 s each).
	if min := r.PublishTimeout + Duration(30e9); r.Lease <= min {
		p.addf("relay.lease", "must exceed publish-timeout plus 30s (%v)", min.D())
	}
}

// tableRE is what the mailbox accepts as a table name (optionally schema.table).
var tableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

type problems []string

func (p *problems) addf(key, format string, args ...any) {
	*p = append(*p, key+": "+fmt.Sprintf(format, args...))
}

// validateAdmin refuses an admin listener anyone on the network could act
// on: without a token beyond loopback (unless allow-open-network says so, in
// the embedded profile only), or with a token that can be guessed where the
// network reaches it (the production profile, or a listener beyond
// loopback).
func (c *Config) validateAdmin(p *problems, prod bool) {
	a := c.Admin
	_, _, listenErr := net.SplitHostPort(a.Listen)
	exposed := a.Listen != "" && listenErr == nil && !loopbackListen(a.Listen)
	if a.Listen != "" {
		checkListen(p, "admin.listen", a.Listen)
		switch {
		case prod && a.NoAdminToken():
			p.addf("admin.listen", "the production profile refuses an admin listener without a token: set admin.operator-token (%s), admin.read-token or admin.tokens", EnvName("admin.operator-token"))
		case exposed && a.NoAdminToken() && !a.AllowOpenNetwork:
			p.addf("admin.listen", "%q is not a loopback address and no admin token is set: anyone who reaches it could replay; set admin tokens, listen on 127.0.0.1, or (knowingly) admin.allow-open-network: true", a.Listen)
		}
	}
	if prod && a.AllowOpenNetwork {
		p.addf("admin.allow-open-network", "the production profile refuses it: the admin listener needs tokens")
	}
	strict := prod || exposed
	secrets := map[string]string{}
	checkSecret := func(key, secret string) {
		switch {
		case secret == "":
			p.addf(key, "missing: the token's secret (%s)", EnvName(key))
			return
		case strict:
			if why := tokenWeakness(secret); why != "" {
				p.addf(key, "%s; a token reachable from the network must be random: `openssl rand -base64 32`", why)
			}
		case len(secret) < 16:
			p.addf(key, "a token must have at least 16 characters")
		}
		if other, ok := secrets[secret]; ok {
			p.addf(key, "must differ from %s", other)
		} else {
			secrets[secret] = key
		}
	}
	if a.OperatorToken != "" {
		checkSecret("admin.operator-token", a.OperatorToken)
	}
	if a.ReadToken != "" {
		checkSecret("admin.read-token", a.ReadToken)
	}
	for _, name := range slices.Sorted(maps.Keys(a.Tokens)) {
		t, key := a.Tokens[name], "admin.tokens."+name
		switch {
		case !tokenName.MatchString(name):
			p.addf(key, "%q: a token's name is 1 to 60 letters, digits, '.', '_', '-' or '@' (the audit records it)", name)
		case name == "read" && a.ReadToken != "" || name == "operator" && a.OperatorToken != "":
			p.addf(key, "the name %s is admin.%s-token's", name, name)
		}
		if t.Scope != "read" && t.Scope != "operator" {
			p.addf(key+".scope", "%q is not a scope (read or operator)", t.Scope)
		}
		checkSecret(key+".secret", t.Secret)
	}
	for i, h := range a.Hosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			p.addf("admin.hosts", "entry %d (%q) is not a host name", i+1, h)
		}
	}
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,60}$`)

// loopbackListen tells whether a listen address is on loopback only.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenWeakness says why a secret could be guessed ("" when it looks
// random): fewer than 32 characters, a word attackers try first, few
// distinct characters, a repeated pattern, pairs of characters or a run
// (aaaaa, 12345), or under
// about 100 bits by the characters' frequencies. A token of random bytes
// (base64 or hex of 16 bytes or more) passes.
func tokenWeakness(s string) string {
	if len(s) < 32 {
		return fmt.Sprintf("a token must have at least 32 characters (it has %d)", len(s))
	}
	lower := strings.ToLower(s)
	for _, w := range weakWords {
		if strings.Contains(lower, w) {
			return fmt.Sprintf("the token holds %q, a word guessed first", w)
		}
	}
	counts := map[rune]int{}
	n := 0
	for _, r := range s {
		counts[r]++
		n++
	}
	if len(counts) < 10 {
		return fmt.Sprintf("the token has only %d distinct characters", len(counts))
	}
	for period := 1; period <= n/2; period++ {
		if s[period:] == s[:len(s)-period] {
			return fmt.Sprintf("the token repeats a pattern of %d characters", period)
		}
	}
	up, down, same := 1, 1, 1
	step := func(run *int, ok bool) {
		if ok {
			*run++
		} else {
			*run = 1
		}
	}
	for i := 1; i < len(s); i++ {
		step(&up, s[i] == s[i-1]+1)
		step(&down, s[i] == s[i-1]-1)
		step(&same, s[i] == s[i-1])
		if up >= 5 || down >= 5 || same >= 5 {
			return "the token holds a run of characters (aaaaa, 12345, edcba)"
		}
	}
	pairs := map[string]bool{}
	for i := 0; i+2 <= len(s); i++ {
		pairs[s[i:i+2]] = true
	}
	if 4*len(pairs) < 3*(len(s)-1) {
		return "the token repeats pairs of characters"
	}
	bits := 0.0
	for _, k := range counts {
		q := float64(k) / float64(n)
		bits -= float64(k) * math.Log2(q)
	}
	if bits < 100 {
		return fmt.Sprintf("the token's characters carry about %.0f bits; at least 100 are needed", bits)
	}
	return ""
}

// weakWords are what a token made by a person tends to hold.
var weakWords = []string{"password", "passwd", "passw0rd", "secret", "changeme", "change-me", "letmein", "qwerty", "admin",
	"token", "example", "default", "msgx", "operator", "test"}

func checkListen(p *problems, key, addr string) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		p.addf(key, "%q is not host:port (port 0 picks a free one)", addr)
	}
}

func list[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}
