package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestNoInternalTypesInPublicAPI parses every public package of the module
// (not under internal/, not a command, not a separate module) and lists the
// exported declarations whose signatures, fields or values name an
// identifier of an internal package.
func TestNoInternalTypesInPublicAPI(t *testing.T) {
	root := moduleRoot(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			// lab/ is the benchmarks and the fault campaign: no library API.
			if name == "internal" || name == "testdata" || name == "lab" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range internalUses(f) {
			found = append(found, rel+": "+m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("exported API mentions an internal package: %s", f)
	}
}

// moduleRoot is the directory of the module's go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// internalUses lists the exported declarations of f that name an identifier
// of an internal package, as "Decl (pkg.Name)".
func internalUses(f *ast.File) []string {
	internal := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.Contains(path, "/internal/") && !strings.HasPrefix(path, "internal/") {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		internal[name] = path
	}
	if len(internal) == 0 {
		return nil
	}
	var out []string
	check := func(decl string, nodes ...ast.Node) {
		for _, n := range nodes {
			if n == nil || isNil(n) {
				continue
			}
			ast.Inspect(n, func(n ast.Node) bool {
				if _, ok := n.(*ast.FuncLit); ok {
					return false // a body is not part of the API
				}
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok {
					if path, ok := internal[id.Name]; ok {
						out = append(out, decl+" ("+path+"."+sel.Sel.Name+")")
					}
				}
				return true
			})
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil {
				recv := receiverType(d.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue
				}
				name = recv + "." + name
			}
			check(name, d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						check(s.Name.Name, exportedPart(s.Type))
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							// The value's type, and its expression when the
							// type is implied by it (var X = internal.New()).
							check(n.Name, s.Type)
							if s.Type == nil {
								for _, v := range s.Values {
									check(n.Name, v)
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// exportedPart is what of a type declaration a user sees: a struct's
// exported and embedded fields, an interface's methods, or the type itself.
func exportedPart(t ast.Expr) ast.Node {
	st, ok := t.(*ast.StructType)
	if !ok {
		return t
	}
	var fields []*ast.Field
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			fields = append(fields, f)
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				fields = append(fields, f)
				break
			}
		}
	}
	return &ast.FieldList{List: fields}
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

func isNil(n ast.Node) bool {
	switch n := n.(type) {
	case ast.Expr:
		return n == nil
	case *ast.FieldList:
		return n == nil
	}
	return false
}
