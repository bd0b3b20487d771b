package sisxml

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/msgx/msgx/pipeline/sis/traffic"
)

// BenchmarkDecode measures Decode on a FLOP (the bulk of traffic), the
// captured daily download (2 flights) and a download of 1 000 flights
// built from it.
func BenchmarkDecode(b *testing.B) {
	flop, _ := traffic.Read("FLOP_GTDT_1.xml")
	dnld, _ := traffic.Read("SCHD_DNLD_1.xml")
	for _, c := range []struct {
		name    string
		payload []byte
	}{
		{"FLOP_GTDT", flop},
		{"SCHD_DNLD", dnld},
		{"SCHD_DNLD_1000", bigDownload(b, dnld, 1000)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(c.payload, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// bigDownload repeats the first flight of a download n times with fresh
// FLIDs and sets RECS to n.
func bigDownload(b *testing.B, dnld []byte, n int) []byte {
	m, err := Decode(dnld, Options{})
	if err != nil {
		b.Fatal(err)
	}
	schd := m.Body[0]
	fltr := schd.Child("FLTR")
	out := &Element{Name: "SCHD", Children: []*Element{{Name: "RECS", Text: strconv.Itoa(n)}}}
	for i := range n {
		f := *fltr
		f.Children = append([]*Element{{Name: "FLID", Text: strconv.Itoa(100000 + i)}}, fltr.Children[1:]...)
		out.Children = append(out.Children, &f)
	}
	m.Body = []*Element{out}
	p := Encode(m)
	if !bytes.Contains(p, []byte("<FLID>100999</FLID>")) {
		b.Fatal("download not built")
	}
	return p
}
