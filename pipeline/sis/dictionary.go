package sis

import (
	"fmt"
	"strings"
)

// Term is an SIS element name with the label an operator reads it by.
type Term struct {
	Name  string `json:"name"`
	Label string `json:"label"`
}

// The dictionary of the SIS names an operator sees: the flight's scalar
// fields (a field with an attribute is NAME_ATTR), its collections, and the
// children of the collections' items. The console labels a flight with it
// and docs/sis.md lists it (TestDictionaryIsDocumented); the SIS name stays
// the authority, the label is a reading aid.
var (
	fieldTerms = []Term{
		{"FFID", "Flight identity (ALCD-FLNO-MVIN-SODT-FLIN)"},
		{"ALCD", "Airline code"},
		{"FLNO", "Flight number"},
		{"MVIN", "Movement (A arrival, D departure)"},
		{"SODT", "Scheduled operation date and time"},
		{"FLTY", "Flight type"},
		{"FLIN", "Domestic or international"},
		{"ACFT", "Aircraft type"},
		{"RENO", "Aircraft registration"},
		{"TRML", "Terminal"},
		{"MAXP", "Maximum passengers"},
		{"STND", "Stand"},
		{"TAOP", "Linked flight operation"},
		{"TAFL", "Linked flight"},
		{"TAID", "Linked flight FLID"},
		{"PHAG", "Passenger handling agent"},
		{"FHAG", "Freight handling agent"},
		{"MHAG", "Maintenance handling agent"},
		{"EXSC", "Exception status code"},
		{"EXSR", "Exception status reason"},
		{"FTSS", "Flight status"},
		{"APPT", "Approach time"},
		{"BOTM", "Boarding time"},
		{"CNCL", "Cancelled at"},
		{"COBT", "Calculated off-block time"},
		{"CTOT", "Calculated take-off time"},
		{"EGSR", "Estimated ground service reason"},
		{"EGST", "Estimated ground service time"},
		{"EOBT", "Estimated off-block time"},
		{"FINT", "Final approach time"},
		{"IEST", "Estimated in-block time"},
		{"LACL", "Last call"},
		{"NAAT", "Actual time at the adjacent airport"},
		{"NEAT", "Estimated time at the adjacent airport"},
		{"PADT", "Previous airport actual departure"},
		{"PEDT", "Previous airport estimated departure"},
		{"REMC", "Remark code"},
		{"RUNW", "Runway"},
		{"TOBT", "Target off-block time"},
		{"VIPP", "VIP on board"},
		{"VIPR", "VIP remark"},
		{"FDIV", "Diversion"},
		{"FDIV_DDES", "Diversion destination"},
		{"FDIV_DDIR", "Diversion direction"},
		{"FLAB", "Flight abnormal"},
		{"FLAB_ARES", "Abnormal reason"},
		{"FRET", "Flight return"},
		{"FRET_REID", "Return reason"},
	}
	collectionTerms = []Term{
		{"ROUT", "Route"},
		{"ERUT", "Extended route"},
		{"GTDT", "Gates"},
		{"PSDT", "Stands"},
		{"CKDT", "Check-in desks"},
		{"CLDT", "Baggage carousels"},
		{"CHDT", "Baggage chutes"},
		{"ABTM", "Airbridges"},
		{"CHOT", "Chocks"},
		{"DELY", "Delays"},
		{"SRVT", "Ground services"},
		{"PSHT", "Pushbacks"},
		{"TIPT", "Transit passengers"},
		{"PORT", "Ports"},
		{"VIPF", "VIP details"},
	}
	itemTerms = []Term{
		{"RTNO", "Route leg"}, {"APCD", "Airport"}, {"SCAT", "Scheduled arrival"}, {"SCDT", "Scheduled departure"},
		{"GTNO", "Gate no."}, {"GATE", "Gate"}, {"PGOT", "Planned open"}, {"PGCT", "Planned close"},
		{"GOTM", "Opened"}, {"GCTM", "Closed"}, {"GTYP", "Gate type"},
		{"PSNO", "Stand no."}, {"PSST", "Stand"}, {"STST", "Stand from"}, {"STET", "Stand until"},
		{"CKNO", "Desk no."}, {"CHKC", "Check-in desk"}, {"CCLS", "Class"}, {"PCOT", "Planned open"},
		{"PCCT", "Planned close"}, {"COTM", "Opened"}, {"CCTM", "Closed"}, {"CTYP", "Type"},
		{"CLNO", "Carousel no."}, {"BELT", "Carousel"}, {"BCLS", "Class"}, {"BTYP", "Type"},
		{"CHNO", "Chute no."}, {"CHUT", "Chute"}, {"PCBT", "Planned begin"}, {"PCET", "Planned end"},
		{"CBTM", "Began"}, {"CETM", "Ended"},
		{"ASNO", "Airbridge no."}, {"ABDG", "Airbridge"}, {"ABOP", "Airbridge operation"}, {"AOTM", "Operated at"},
		{"CSNO", "Chocks no."}, {"CHTM", "Chocks time"}, {"CHID", "Chocks id"}, {"CHST", "Chocks state"},
		{"CODE", "Delay code"}, {"STRT", "Delay start"}, {"DURA", "Delay duration"},
		{"PSHN", "Pushback no."},
	}
	labels = func() map[string]string {
		m := map[string]string{}
		for _, list := range [][]Term{fieldTerms, collectionTerms, itemTerms} {
			for _, t := range list {
				if _, dup := m[t.Name]; !dup {
					m[t.Name] = t.Label
				}
			}
		}
		return m
	}()
)

// Label returns the readable label of an SIS element name (a field, a
// collection or a child of a collection's item; "@NAME" for an attribute),
// "" for a name the dictionary does not hold (a field msgx kept without
// knowing it).
func Label(name string) string {
	return labels[strings.TrimPrefix(name, "@")]
}

// FieldTerms returns the scalar fields of the dictionary in the order an
// operator reads them.
func FieldTerms() []Term { return append([]Term(nil), fieldTerms...) }

// CollectionTerms returns the collections of the dictionary.
func CollectionTerms() []Term { return append([]Term(nil), collectionTerms...) }

// DictionaryMarkdown is the dictionary as the tables docs/sis.md shows.
func DictionaryMarkdown() string {
	var b strings.Builder
	b.WriteString("| field | label |\n|---|---|\n")
	for _, t := range fieldTerms {
		fmt.Fprintf(&b, "| `%s` | %s |\n", t.Name, t.Label)
	}
	b.WriteString("\n| collection | label |\n|---|---|\n")
	for _, t := range collectionTerms {
		fmt.Fprintf(&b, "| `%s` | %s |\n", t.Name, t.Label)
	}
	b.WriteString("\n| item child | label |\n|---|---|\n")
	for _, t := range itemTerms {
		fmt.Fprintf(&b, "| `%s` | %s |\n", t.Name, t.Label)
	}
	return b.String()
}
