package bench

import (
	"fmt"
	"io"
	"slices"
)

// RoundOrder is the order a round runs list in: as given, and reversed every
// other round, so that the machine's drift during a round weighs on the
// first and the last alike.
func RoundOrder(list []string, round int) []string {
	out := slices.Clone(list)
	if round%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// CheckDistinct refuses a list that names something twice: a set run again
// is what rounds are for.
func CheckDistinct(list []string) error {
	if len(slices.Compact(slices.Sorted(slices.Values(list)))) != len(list) {
		return fmt.Errorf("%v lists a name twice (--rounds repeats the set)", list)
	}
	return nil
}

// Ratios prints the ratios of a round as they are measured and keeps them,
// so that a run of several rounds ends with each ratio's median: the
// machine's drift weighs on both sides of a ratio measured in one round,
// and the median keeps one unlucky round from deciding.
type Ratios struct {
	Workload string
	names    []string
	values   map[string][]float64
}

// Add prints the RATIO line of a/b under name and keeps the value.
func (l *Ratios) Add(out io.Writer, name string, a, b Result) {
	fmt.Fprintf(out, "RATIO workload=%s %s=%s\n", l.Workload, name, Ratio(a, b))
	if b.PerSec() == 0 {
		return
	}
	if l.values == nil {
		l.values = map[string][]float64{}
	}
	if _, ok := l.values[name]; !ok {
		l.names = append(l.names, name)
	}
	l.values[name] = append(l.values[name], a.PerSec()/b.PerSec())
}

// PrintMedians prints one line per ratio: its median over the rounds (the
// mean of the middle two for an even count), with the smallest and largest.
func (l *Ratios) PrintMedians(out io.Writer) {
	for _, name := range l.names {
		v := slices.Sorted(slices.Values(l.values[name]))
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		fmt.Fprintf(out, "RATIO workload=%s %s=%.2f rounds=%d min=%.2f max=%.2f median=true\n", l.Workload, name, med, len(v), v[0], v[len(v)-1])
	}
}
