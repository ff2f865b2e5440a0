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
// list .ci/run runs without -race, and every name the list spells out is a
// test of the repository, so that neither a new Skip nor a renamed test
// drops out of CI unseen.
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

	skipping, tests := map[string]string{}, map[string]bool{}
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
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			tests[fn.Name.Name] = true
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && isSkip(call.Fun) {
					skipping[fn.Name.Name] = path
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
	for name, path := range skipping {
		if !list.MatchString(name) {
			t.Errorf("%s (%s) skips under -race, and .ci/run's norace list does not run it without", name, path)
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

// isSkip says whether fun is racetest.Skip.
func isSkip(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Skip" {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "racetest"
}
