package sisxml

import (
	"fmt"
	"sync"
	"time"
)

// DefaultLocation is the airport time zone used when Options.Location is
// nil: Asia/Shanghai, or a fixed UTC+8 zone of that name where the system
// has no time zone database (Shanghai has kept UTC+8 without daylight
// saving since 1991).
func DefaultLocation() *time.Location { return shanghai() }

var shanghai = sync.OnceValue(func() *time.Location {
	if loc, err := time.LoadLocation("Asia/Shanghai"); err == nil {
		return loc
	}
	return time.FixedZone("Asia/Shanghai", 8*3600)
})

// ParseDTTM parses a META DTTM, yyyyMMddHHmmss (20181105223126), in loc.
func ParseDTTM(s string, loc *time.Location) (time.Time, error) {
	if len(s) != 14 || !allDigits(s) {
		return time.Time{}, fmt.Errorf("%q is not yyyyMMddHHmmss", s)
	}
	t, err := time.ParseInLocation("20060102150405", s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a valid date and time", s)
	}
	return t, nil
}

var months = [12]string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}

// ParseBodyTime parses a body time, ddMONyyHHmm (23JAN210535) or ddMONyy
// (23JAN21), in loc. Month names are English, case-insensitive.
// Two-digit years 69-99 are 1969-1999, 00-68 are 2000-2068 (as Go's "06").
func ParseBodyTime(s string, loc *time.Location) (t time.Time, dateOnly bool, err error) {
	if len(s) != 7 && len(s) != 11 {
		return time.Time{}, false, fmt.Errorf("body time %q is not ddMONyy or ddMONyyHHmm", s)
	}
	if !allDigits(s[0:2]) || !allDigits(s[5:]) {
		return time.Time{}, false, fmt.Errorf("body time %q is not ddMONyy or ddMONyyHHmm", s)
	}
	month := 0
	for i, name := range months {
		if equalFoldASCII(s[2:5], name) {
			month = i + 1
			break
		}
	}
	if month == 0 {
		return time.Time{}, false, fmt.Errorf("body time %q: unknown month %q", s, s[2:5])
	}
	day, yy := num(s[0:2]), num(s[5:7])
	year := 2000 + yy
	if yy >= 69 {
		year = 1900 + yy
	}
	hour, minute := 0, 0
	dateOnly = len(s) == 7
	if !dateOnly {
		hour, minute = num(s[7:9]), num(s[9:11])
		if hour > 23 || minute > 59 {
			return time.Time{}, false, fmt.Errorf("body time %q: no such time of day", s)
		}
	}
	t = time.Date(year, time.Month(month), day, hour, minute, 0, 0, loc)
	if day == 0 || t.Day() != day || t.Month() != time.Month(month) {
		return time.Time{}, false, fmt.Errorf("body time %q: no such date", s)
	}
	return t, dateOnly, nil
}

// ParseClock parses a time of day, HHmm (1023), as SCHS writes its
// scheduled times; the date comes from elsewhere (the season, the day of
// operation), so it returns the hour and minute only.
func ParseClock(s string) (hour, minute int, err error) {
	if len(s) != 4 || !allDigits(s) {
		return 0, 0, fmt.Errorf("time of day %q is not HHmm", s)
	}
	hour, minute = num(s[:2]), num(s[2:])
	if hour > 23 || minute > 59 {
		return 0, 0, fmt.Errorf("time of day %q: no such time", s)
	}
	return hour, minute, nil
}

func num(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
