package traffic

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// adft adds the two flights the bundled FLOP messages refer to that the
// bundled schedule (SCHD DNLD, flights 15 and 16) does not carry: composed
// for the feed, so that every FLOP finds its flight.
const adft = `<?xml version="1.0" encoding="UTF-8"?>
<MSG><META><SNDR>AODB</SNDR><SEQN>0</SEQN><DTTM>20031215080000</DTTM><TYPE>SCHD</TYPE><STYP>ADFT</STYP></META>
<SCHD><RECS>2</RECS>
<FLTR><FLID>121112312</FLID><ALCD>CA</ALCD><FLNO>CA101</FLNO><MVIN>A</MVIN><SODT>15DEC031345</SODT><FLTY>W</FLTY><FLIN>D</FLIN></FLTR>
<FLTR><FLID>7610151</FLID><ALCD>CA</ALCD><FLNO>CA9001</FLNO><MVIN>A</MVIN><SODT>15DEC201200</SODT><FLTY>W</FLTY><FLIN>D</FLIN></FLTR>
</SCHD></MSG>`

var seqnRE = regexp.MustCompile(`<SEQN>[^<]*</SEQN>`)

// Ordered returns the bundled messages as one feed in mailbox order, each
// with SEQN base+i+1: the schedule first, then the composed ADFT, then every
// other bundled message in name order with the FDEL last (so the deletion is
// its flight's final change). The demo feeds it to the pipeline; tests use
// it as real traffic that every flight message of finds its flight.
func Ordered(base int64) ([][]byte, error) {
	names := Names()
	slices.SortStableFunc(names, func(a, b string) int {
		return rank(a) - rank(b)
	})
	out := make([][]byte, 0, len(names)+1)
	for _, n := range names {
		b, err := Read(n)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
		if n == "SCHD_DNLD_1.xml" {
			out = append(out, []byte(adft))
		}
	}
	for i := range out {
		out[i] = seqnRE.ReplaceAll(out[i], []byte("<SEQN>"+strconv.FormatInt(base+int64(i)+1, 10)+"</SEQN>"))
	}
	return out, nil
}

func rank(name string) int {
	switch {
	case name == "SCHD_DNLD_1.xml":
		return -1
	case strings.HasPrefix(name, "FLOP_FDEL_"):
		return 1
	}
	return 0
}
