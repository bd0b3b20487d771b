package store

import (
	"bufio"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Queries holds named SQL statements of one dialect, read from files in which
// each statement is introduced by a line "-- name: StatementName".
type Queries map[string]string

// LoadQueries reads every .sql file in dir/<dialect> of fsys. Packages that own
// tables keep their SQL this way, one directory per dialect.
func LoadQueries(fsys fs.FS, dir string, d Dialect) (Queries, error) {
	sub := path.Join(dir, string(d))
	entries, err := fs.ReadDir(fsys, sub)
	if err != nil {
		return nil, fmt.Errorf("store: queries %s: %w", sub, err)
	}
	q := Queries{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		data, err := fs.ReadFile(fsys, path.Join(sub, e.Name()))
		if err != nil {
			return nil, err
		}
		if err := q.parse(e.Name(), string(data)); err != nil {
			return nil, err
		}
	}
	return q, nil
}

func (q Queries) parse(file, text string) error {
	var name string
	var body strings.Builder
	flush := func() error {
		if name == "" {
			return nil
		}
		if _, dup := q[name]; dup {
			return fmt.Errorf("store: %s: query %q defined twice", file, name)
		}
		q[name] = strings.TrimSpace(body.String())
		body.Reset()
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "-- name:"); ok {
			if err := flush(); err != nil {
				return err
			}
			name = strings.TrimSpace(rest)
			continue
		}
		if name != "" {
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return flush()
}

// Get returns a statement; a missing name is a programming error caught by
// the package's tests, so it panics.
func (q Queries) Get(name string) string {
	s, ok := q[name]
	if !ok {
		panic("store: no query named " + name)
	}
	return s
}

// QuerySet is a package's embedded SQL for every dialect, loaded once at
// package initialisation and read-only afterwards.
type QuerySet struct {
	owner     string
	byDialect map[Dialect]Queries
}

// MustLoadQuerySet reads dir/<dialect>/*.sql of fsys for every dialect. The
// files are compiled into the binary, so a broken one is a build defect that
// every test of the owning package catches: it panics rather than returning.
func MustLoadQuerySet(owner string, fsys fs.FS, dir string) QuerySet {
	s := QuerySet{owner: owner, byDialect: map[Dialect]Queries{}}
	for _, d := range []Dialect{Postgres, SQLite} {
		q, err := LoadQueries(fsys, dir, d)
		if err != nil {
			panic(fmt.Sprintf("%s: %v", owner, err))
		}
		s.byDialect[d] = q
	}
	return s
}

// For returns the statements of a dialect.
func (s QuerySet) For(d Dialect) (Queries, error) {
	q, ok := s.byDialect[d]
	if !ok {
		return nil, fmt.Errorf("%s: unsupported dialect %q", s.owner, d)
	}
	return q, nil
}
