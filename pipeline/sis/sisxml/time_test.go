package sisxml

import (
	"testing"
	"time"
)

func TestParseBodyTime(t *testing.T) {
	sh := DefaultLocation()
	utc := time.UTC
	cases := []struct {
		in       string
		loc      *time.Location
		want     time.Time
		dateOnly bool
		bad      bool
	}{
		{in: "23JAN210535", loc: sh, want: time.Date(2021, 1, 23, 5, 35, 0, 0, sh)},
		{in: "23jan210535", loc: sh, want: time.Date(2021, 1, 23, 5, 35, 0, 0, sh)},
		{in: "15Dec031805", loc: utc, want: time.Date(2003, 12, 15, 18, 5, 0, 0, utc)},
		{in: "23JAN21", loc: sh, want: time.Date(2021, 1, 23, 0, 0, 0, 0, sh), dateOnly: true},
		{in: "29FEB24", loc: sh, want: time.Date(2024, 2, 29, 0, 0, 0, 0, sh), dateOnly: true},
		{in: "31DEC992359", loc: sh, want: time.Date(1999, 12, 31, 23, 59, 0, 0, sh)},
		{in: "01JAN680000", loc: sh, want: time.Date(2068, 1, 1, 0, 0, 0, 0, sh)},
		{in: "01JAN690000", loc: sh, want: time.Date(1969, 1, 1, 0, 0, 0, 0, sh)},
		{in: "31FEB21", bad: true},
		{in: "29FEB23", bad: true},
		{in: "31APR211200", bad: true},
		{in: "00JAN21", bad: true},
		{in: "32JAN21", bad: true},
		{in: "23JAN212400", bad: true},
		{in: "23JAN212360", bad: true},
		{in: "23XYZ21", bad: true},
		{in: "23JA N21", bad: true},
		{in: "2JAN21", bad: true},
		{in: "23JAN2105", bad: true},
		{in: "23JAN21053", bad: true},
		{in: "23JAN2105355", bad: true},
		{in: "", bad: true},
		{in: "AAJAN21", bad: true},
		{in: "23JAN2A0535", bad: true},
		{in: "23JAN21-535", bad: true},
		{in: "+3JAN21", bad: true},
		{in: "23JAN21 535", bad: true},
	}
	for _, c := range cases {
		loc := c.loc
		if loc == nil {
			loc = sh
		}
		got, dateOnly, err := ParseBodyTime(c.in, loc)
		if c.bad {
			if err == nil {
				t.Errorf("ParseBodyTime(%q) = %v, want an error", c.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseBodyTime(%q): %v", c.in, err)
			continue
		}
		if !got.Equal(c.want) || got.Location() != c.want.Location() || dateOnly != c.dateOnly {
			t.Errorf("ParseBodyTime(%q) = %v, %v; want %v, %v", c.in, got, dateOnly, c.want, c.dateOnly)
		}
	}
}

func TestParseDTTM(t *testing.T) {
	sh := DefaultLocation()
	got, err := ParseDTTM("20181105223126", sh)
	if err != nil || !got.Equal(time.Date(2018, 11, 5, 22, 31, 26, 0, sh)) {
		t.Errorf("ParseDTTM = %v, %v", got, err)
	}
	for _, bad := range []string{"", "2018110522312", "201811052231260", "20181105223160", "20181131223126", "20181305223126", "2018110522312a", "+0181105223126", " 0181105223126"} {
		if got, err := ParseDTTM(bad, sh); err == nil {
			t.Errorf("ParseDTTM(%q) = %v, want an error", bad, got)
		}
	}
}

func TestDefaultLocationIsUTC8(t *testing.T) {
	_, off := time.Date(2021, 7, 1, 12, 0, 0, 0, DefaultLocation()).Zone()
	if off != 8*3600 {
		t.Errorf("offset %d, want UTC+8", off)
	}
}

func TestParseClock(t *testing.T) {
	for in, want := range map[string][2]int{"0000": {0, 0}, "1023": {10, 23}, "2359": {23, 59}} {
		h, m, err := ParseClock(in)
		if err != nil || h != want[0] || m != want[1] {
			t.Errorf("ParseClock(%q) = %d, %d, %v; want %v", in, h, m, err, want)
		}
	}
	for _, bad := range []string{"", "123", "12345", "2400", "1260", "12:3", "-100", "ab12"} {
		if h, m, err := ParseClock(bad); err == nil {
			t.Errorf("ParseClock(%q) = %d, %d; want an error", bad, h, m)
		}
	}
}
