package sis_test

import (
	"os"
	"strings"
	"testing"

	"github.com/msgx/msgx/pipeline/sis"
)

// TestDictionaryIsDocumented: every field with a column and every known
// collection has a label, and docs/sis.md shows the dictionary as the code
// holds it.
func TestDictionaryIsDocumented(t *testing.T) {
	for _, n := range append(sis.ScalarColumns(), sis.KnownCollections()...) {
		if sis.Label(n) == "" {
			t.Errorf("%s has no label", n)
		}
	}
	if sis.Label("@CODE") != "Delay code" || sis.Label("XYZW") != "" {
		t.Errorf("labels of @CODE %q, XYZW %q", sis.Label("@CODE"), sis.Label("XYZW"))
	}
	doc, err := os.ReadFile("../../docs/sis.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), sis.DictionaryMarkdown()) {
		t.Errorf("docs/sis.md does not show the dictionary as the code holds it; its tables should read:\n%s", sis.DictionaryMarkdown())
	}
}
