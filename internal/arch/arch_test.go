package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/weirstream/weir"

// layers ranks each package (relative to the module); a package imports
// only packages of a lower rank. The tens digit is the layer of DESIGN.md's
// package map; the units order packages within a layer. A new package must
// be added here.
var layers = map[string]int{
	"internal/keygroup":                           0,
	"internal/arena":                              0,
	"internal/hashtab":                            0,
	"internal/cacheline":                          0,
	"internal/idpart":                             0,
	"internal/lockfile":                           0,
	"internal/flagcheck":                          0,
	"internal/pgtest":                             0,
	"internal/s3test":                             0,
	"internal/etcdtest":                           0,
	"internal/browsertest":                        0,
	"internal/racetest":                           0,
	"internal/profiling":                          0,
	"internal/cluster/clusterpb":                  0,
	"internal/cluster/clusterpb/clusterpbconnect": 1,
	"internal/arch":                               0,
	"checkpoint":                                  10,
	"checkpoint/barrier":                          11,
	"checkpoint/model":                            12,
	"graph":                                       11,
	"codec":                                       20,
	"internal/ha":                                 20,
	"storage":                                     21,
	"operator":                                    22,
	"operator/operatortest":                       23,
	"state":                                       21,
	"state/heap":                                  22,
	"state/local":                                 22,
	"state/pebble":                                23,
	"state/backend":                               24,
	"state/statetest":                             25,
	"internal/runtime":                            30,
	"internal/sim":                                30,
	"internal/transport":                          31,
	"internal/cluster":                            40,
	"internal/web":                                41,
	".":                                           50,
	"connector/file":                              51,
	"connector/generator":                         51,
	"connector/kafka":                             51,
	"connector/postgres":                          51,
	"connector/writeahead":                        51,
	"connector/stdio":                             51,
	"examples/wordcount":                          52,
	"examples/nexmark":                            52,
	"cmd/weir":                                    53,
	"deploy/kubernetes":                           0,
}

// pure packages: deterministic state machines and plans.
var pure = []string{"checkpoint", "checkpoint/barrier", "graph"}

var forbiddenInPure = map[string]string{
	"os": "I/O", "net": "I/O", "net/http": "I/O", "io/fs": "I/O", "syscall": "I/O",
	"math/rand": "global randomness", "math/rand/v2": "global randomness", "crypto/rand": "randomness",
	"sync": "concurrency", "sync/atomic": "concurrency", "log": "logging", "log/slog": "logging",
}

var clockFuncs = map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true}

func root(t *testing.T) string {
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// packages parses every non-test Go file of the module, by package.
func packages(t *testing.T) map[string][]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	base := root(t)
	err := filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != base {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		pkgs[rel] = append(pkgs[rel], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func imports(f *ast.File) []string {
	var out []string
	for _, s := range f.Imports {
		p, _ := strconv.Unquote(s.Path.Value)
		out = append(out, p)
	}
	return out
}

func TestLayering(t *testing.T) {
	for pkg, files := range packages(t) {
		layer, ok := layers[pkg]
		if !ok {
			t.Errorf("package %s has no layer: add it to the layers map (and DESIGN.md's package map)", pkg)
			continue
		}
		for _, f := range files {
			for _, imp := range imports(f) {
				dep, ok := strings.CutPrefix(imp, module+"/")
				if !ok {
					if imp == module {
						dep = "."
					} else {
						continue
					}
				}
				dl, known := layers[dep]
				if !known || dl >= layer {
					t.Errorf("%s (layer %d) imports %s (layer %d): import only downwards", pkg, layer, dep, dl)
				}
			}
		}
	}
}

func TestProtocolCoreIsPure(t *testing.T) {
	pkgs := packages(t)
	for _, pkg := range pure {
		files := pkgs[pkg]
		if len(files) == 0 {
			t.Fatalf("pure package %s not found", pkg)
		}
		for _, f := range files {
			for _, imp := range imports(f) {
				if why, bad := forbiddenInPure[imp]; bad {
					t.Errorf("%s imports %s (%s): the protocol core must stay pure", pkg, imp, why)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s starts a goroutine: the protocol core must stay pure", pkg)
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" && clockFuncs[n.Sel.Name] {
						t.Errorf("%s calls time.%s: time must be handed in", pkg, n.Sel.Name)
					}
				}
				return true
			})
		}
	}
}
