// Package traffic bundles real SIS traffic: 172 messages captured from an
// AODB installation, one file each, named TYPE_STYP_n.xml. The demo feeds
// them through the pipeline; the codec's and the processors' tests read them.
//
// Many share SNDR=AODB and SEQN=1243, so by business identity they are
// duplicates of each other; callers that want each one processed give them
// fresh sequence numbers.
package traffic

import (
	"embed"
	"io/fs"
	"slices"
)

//go:embed *.xml
var files embed.FS

// Names returns the file names in lexical order.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// Read returns the bytes of one file, exactly as captured.
func Read(name string) ([]byte, error) { return files.ReadFile(name) }
