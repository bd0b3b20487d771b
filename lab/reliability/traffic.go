package reliability

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync/atomic"
)

// The generated traffic is deliberately small so that the oracle stays
// small: one SCHD/DNLD announces a fixed set of flights of one day, then
// FLOP/STND (a scalar) and FLOP/GTDT (a collection) change them.

// gen numbers the messages: every generated message has its own SEQN, so
// its business identity AODB|TYPE|STYP|SEQN is unique; a second copy of the
// same body is a duplicate insert.
type gen struct {
	seq     atomic.Int64
	flights []string
}

func newGen(flights int, base int64) *gen {
	g := &gen{}
	g.seq.Store(base)
	for i := range flights {
		g.flights = append(g.flights, fmt.Sprintf("%d", 900000+i))
	}
	return g
}

func meta(seq int64, typ, styp string) string {
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<MSG><META><SNDR>AODB</SNDR><SEQN>%d</SEQN><DTTM>20261201080000</DTTM><TYPE>%s</TYPE><STYP>%s</STYP></META>`, seq, typ, styp)
}

// dnld announces every flight, all on 1 Dec 2026.
func (g *gen) dnld() []byte {
	var b strings.Builder
	b.WriteString(meta(g.seq.Add(1), "SCHD", "DNLD"))
	fmt.Fprintf(&b, "<SCHD><RECS>%d</RECS>", len(g.flights))
	for i, f := range g.flights {
		fmt.Fprintf(&b, "<FLTR><FLID>%s</FLID><ALCD>CA</ALCD><FLNO>CA%d</FLNO><MVIN>D</MVIN><SODT>01DEC26%02d00</SODT></FLTR>", f, 1000+i, 6+i%12)
	}
	b.WriteString("</SCHD></MSG>")
	return []byte(b.String())
}

// flop is a STND or a GTDT update of one of the flights. The values come
// from small sets so that many updates change nothing (no event expected).
func (g *gen) flop(r *rand.Rand) []byte {
	flid := g.flights[r.IntN(len(g.flights))]
	var b strings.Builder
	if r.IntN(2) == 0 {
		b.WriteString(meta(g.seq.Add(1), "FLOP", "STND"))
		fmt.Fprintf(&b, "<FLOP><FLID>%s</FLID><STND>S%d</STND></FLOP></MSG>", flid, r.IntN(4))
		return []byte(b.String())
	}
	b.WriteString(meta(g.seq.Add(1), "FLOP", "GTDT"))
	fmt.Fprintf(&b, "<FLOP><FLID>%s</FLID>", flid)
	for i := range r.IntN(3) {
		fmt.Fprintf(&b, `<GTDT GTNO="%d"><GATE>G%d</GATE></GTDT>`, i+1, r.IntN(3))
	}
	b.WriteString("</FLOP></MSG>")
	return []byte(b.String())
}

// parsed is what the oracle reads of a generated message, with its own
// patterns (not the codec).
type parsed struct {
	identity string
	styp     string
	flids    []string
	stnd     string
	gates    []string
}

var (
	seqnRE = regexp.MustCompile(`<SEQN>(\d+)</SEQN>`)
	typeRE = regexp.MustCompile(`<TYPE>(\w+)</TYPE><STYP>(\w+)</STYP>`)
	flidRE = regexp.MustCompile(`<FLID>(\d+)</FLID>`)
	stndRE = regexp.MustCompile(`<STND>(\w+)</STND>`)
	gateRE = regexp.MustCompile(`<GATE>(\w+)</GATE>`)
)

func parse(body string) (parsed, bool) {
	s, t := seqnRE.FindStringSubmatch(body), typeRE.FindStringSubmatch(body)
	if s == nil || t == nil || !strings.HasPrefix(body, `<?xml version="1.0" encoding="UTF-8"?>`+"\n<MSG><META><SNDR>AODB</SNDR>") {
		return parsed{}, false
	}
	p := parsed{identity: "AODB|" + t[1] + "|" + t[2] + "|" + s[1], styp: t[2]}
	for _, m := range flidRE.FindAllStringSubmatch(body, -1) {
		p.flids = append(p.flids, m[1])
	}
	if len(p.flids) == 0 {
		return parsed{}, false
	}
	if m := stndRE.FindStringSubmatch(body); m != nil {
		p.stnd = m[1]
	}
	for _, m := range gateRE.FindAllStringSubmatch(body, -1) {
		p.gates = append(p.gates, m[1])
	}
	return p, true
}

// hostile are bodies no sender should send: each must end DEAD (or
// SKIPPED: it names no known flight) with a reason, the process running.
// The FLIDs they name are outside the generated set.
func hostile(g *gen) map[string][]byte {
	m := map[string][]byte{}
	full := meta(g.seq.Add(1), "FLOP", "STND") + "<FLOP><FLID>777001</FLID><STND>S1</STND></FLOP></MSG>"
	m["truncated"] = []byte(full[:len(full)/2])
	m["not-xml"] = []byte("\x00\x01 this is not a message \xfe")
	m["invalid-utf8"] = []byte(meta(g.seq.Add(1), "FLOP", "STND") + "<FLOP><FLID>777002</FLID><STND>\xd6\xd0\xff</STND></FLOP></MSG>")
	m["deep-nesting"] = []byte(meta(g.seq.Add(1), "FLOP", "STND") + "<FLOP><FLID>777003</FLID>" +
		strings.Repeat("<X>", 100000) + strings.Repeat("</X>", 100000) + "</FLOP></MSG>")
	var lol strings.Builder
	lol.WriteString(`<?xml version="1.0"?><!DOCTYPE MSG [<!ENTITY a "lollollollollollollollollollol">`)
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&lol, `<!ENTITY %c "%s">`, 'a'+i, strings.Repeat(fmt.Sprintf("&%c;", 'a'+i-1), 10))
	}
	lol.WriteString("]>")
	fmt.Fprintf(&lol, "<MSG><META><SNDR>AODB</SNDR><SEQN>%d</SEQN><DTTM>20261201080000</DTTM><TYPE>FLOP</TYPE><STYP>STND</STYP></META><FLOP><FLID>777004</FLID><STND>&j;</STND></FLOP></MSG>", g.seq.Add(1))
	m["entity-expansion"] = []byte(lol.String())
	m["no-body"] = []byte(meta(g.seq.Add(1), "FLOP", "STND") + "</MSG>")
	return m
}
