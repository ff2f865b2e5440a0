package racetest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCIRunsWhatRaceSkips: every test that calls Skip is matched by the
// list .ci/run runs without -race, in a package that run names, and every
// name the list spells out is a test of the repository, so that neither a
// new Skip nor a renamed test drops out of CI unseen. Skip must be called
// by the Test function itself (under any import name), not by a helper,
// a fuzz target or a benchmark, which the check could not follow.
func TestCIRunsWhatRaceSkips(t *testing.T) {
	root := filepath.Join("..", "..")
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^norace='([^']+)'$`).FindSubmatch(ci)
	if m == nil {
		t.Fatal(".ci/run has no line norace='^(...)$' listing the tests it runs without -race")
	}
	list := regexp.MustCompile(string(m[1]))
	run := regexp.MustCompile(`(?m)^go test -count=1 (?:-timeout \S+ )?-run "\$norace" ([^|\n]+)`).FindSubmatch(ci)
	if run == nil {
		t.Fatal(`.ci/run has no line go test -count=1 [-timeout T] -run "$norace" <packages>`)
	}
	packages := map[string]bool{}
	for _, p := range strings.Fields(string(run[1])) {
		packages[filepath.Clean(strings.TrimPrefix(p, "./"))] = true
	}

	type place struct{ pkg, path string }
	skipping, tests := map[string]place{}, map[string]bool{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		name := ""
		for _, imp := range f.Imports {
			if strings.HasSuffix(strings.Trim(imp.Path.Value, `"`), "/internal/racetest") {
				name = "racetest"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		pkg, _ := filepath.Rel(root, filepath.Dir(path))
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			isTest := fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test")
			if isTest {
				tests[fn.Name.Name] = true
			}
			if name == "" || name == "_" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && isSkip(call.Fun, name) {
					if isTest {
						skipping[fn.Name.Name] = place{pkg, path}
					} else {
						t.Errorf("%s (%s) calls racetest.Skip: call it from the Test function itself, so that this check can find it", fn.Name.Name, path)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(skipping) == 0 {
		t.Fatal("found no test that calls racetest.Skip: is the walk of the repository broken?")
	}
	for name, at := range skipping {
		if !list.MatchString(name) {
			t.Errorf("%s (%s) skips under -race, and .ci/run's norace list does not run it without", name, at.path)
		}
		if !packages[at.pkg] {
			t.Errorf("%s (%s) skips under -race, and .ci/run's run without -race does not test its package ./%s", name, at.path, at.pkg)
		}
	}
	alternatives := strings.TrimSuffix(strings.TrimPrefix(string(m[1]), "^("), ")$")
	for _, alt := range strings.Split(alternatives, "|") {
		re := regexp.MustCompile("^" + alt + "$")
		found := false
		for name := range tests {
			found = found || re.MatchString(name)
		}
		if !found {
			t.Errorf(".ci/run's norace list names %q, which is no test of the repository", alt)
		}
	}
}

// isSkip says whether fun is Skip of racetest imported as name.
func isSkip(fun ast.Expr, name string) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Skip" {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == name
}
