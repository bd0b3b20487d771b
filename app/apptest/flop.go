package apptest

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis/traffic"
)

// FLOPs returns the bundled FLOP messages (pipeline/sis/traffic) in name
// order.
func FLOPs() ([][]byte, error) {
	var out [][]byte
	for _, n := range traffic.Names() {
		if !strings.HasPrefix(n, "FLOP_") {
			continue
		}
		b, err := traffic.Read(n)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

var (
	seqnRE = regexp.MustCompile(`<SEQN>[^<]*</SEQN>`)
	flidRE = regexp.MustCompile(`<FLID>[^<]*</FLID>`)
)

// Messages returns n messages rotating the bundled FLOP messages, message i
// with SEQN base+i+1 and one of flids FLIDs.
func Messages(n, flids int, base int64) ([][]byte, error) {
	fx, err := FLOPs()
	if err != nil {
		return nil, err
	}
	return Rotate(fx, n, flids, base)
}

// Rotate returns n messages cycling through fx, message i with SEQN
// base+i+1 and FLID 900000+i%flids.
func Rotate(fx [][]byte, n, flids int, base int64) ([][]byte, error) {
	if len(fx) == 0 {
		return nil, errors.New("apptest: no messages to rotate")
	}
	out := make([][]byte, n)
	for i := range n {
		m := seqnRE.ReplaceAll(fx[i%len(fx)], []byte("<SEQN>"+strconv.FormatInt(base+int64(i)+1, 10)+"</SEQN>"))
		m = flidRE.ReplaceAll(m, []byte("<FLID>"+strconv.Itoa(900000+i%flids)+"</FLID>"))
		out[i] = m
	}
	return out, nil
}

// Flop is a decoded FLOP message head.
type Flop struct {
	SNDR, TYPE, STYP, SEQN, FLID string
}

// DecodeFlop decodes the head of a FLOP message: identity
// SNDR|TYPE|STYP|SEQN, kind TYPE/STYP, value a Flop.
func DecodeFlop(p []byte) (inbox.DecodedOf[Flop], error) {
	f, err := ParseHead(p)
	if err != nil {
		return inbox.DecodedOf[Flop]{}, err
	}
	return inbox.DecodedOf[Flop]{
		Identity: f.SNDR + "|" + f.TYPE + "|" + f.STYP + "|" + f.SEQN,
		Kind:     f.TYPE + "/" + f.STYP,
		Value:    f,
	}, nil
}

// ParseHead reads META and the FLID of a FLOP message, stopping as soon as it
// has them. Not XML or no META is MALFORMED.
func ParseHead(p []byte) (Flop, error) {
	var f Flop
	d := xml.NewDecoder(bytes.NewReader(p))
	var cur *string
	found := 0
	for found < 5 {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return f, inbox.Fail(inbox.Malformed, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			cur = nil
			switch t.Name.Local {
			case "SNDR":
				cur = &f.SNDR
			case "TYPE":
				cur = &f.TYPE
			case "STYP":
				cur = &f.STYP
			case "SEQN":
				cur = &f.SEQN
			case "FLID":
				cur = &f.FLID
			}
		case xml.CharData:
			if cur != nil && *cur == "" {
				*cur = strings.TrimSpace(string(t))
				if *cur != "" {
					found++
				}
			}
		case xml.EndElement:
			cur = nil
		}
	}
	if f.SNDR == "" || f.TYPE == "" || f.STYP == "" || f.SEQN == "" {
		return f, inbox.Failf(inbox.Malformed, "no META (SNDR/TYPE/STYP/SEQN)")
	}
	if f.FLID == "" {
		return f, inbox.Failf(inbox.Malformed, "no FLID")
	}
	return f, nil
}
