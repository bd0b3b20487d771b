package sisxml_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/pipeline/sis/traffic"
)

func Example() {
	payload, _ := traffic.Read("FLOP_GTDT_1.xml")
	shanghai := sisxml.DefaultLocation()

	m, err := sisxml.Decode(payload, sisxml.Options{Location: shanghai})
	if err != nil {
		var e *sisxml.Error
		if errors.As(err, &e) {
			fmt.Println(e.Class) // MALFORMED or CODEC_ERROR
		}
		return
	}
	fmt.Println(m.Meta.Kind(), m.Meta.Sender, m.Meta.Seq, m.Meta.Sent.Format(time.RFC3339))

	flop := m.Body[0]
	fmt.Println("FLID", flop.ChildText("FLID"))
	for _, gate := range flop.All("GTDT") {
		open, _, err := sisxml.ParseBodyTime(gate.ChildText("PGOT"), shanghai)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(gate.Attr("GTNO"), gate.ChildText("GATE"), open.Format("2006-01-02 15:04"))
	}
	// Output:
	// FLOP/GTDT AODB 1243 2002-10-10T09:03:11+08:00
	// FLID 121112312
	// 1 G28 2003-12-15 18:05
	// 2 G33 2003-12-15 18:05
	// 3 G23 2003-12-15 18:05
}

func ExampleDecode_malformed() {
	_, err := sisxml.Decode([]byte(`<MSG><META><SNDR>AODB</SNDR><SEQN>x1</SEQN></META></MSG>`), sisxml.Options{})
	fmt.Println(err)
	// Output:
	// MALFORMED: MSG has no body element after <META>
}
