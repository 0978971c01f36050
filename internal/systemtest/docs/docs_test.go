package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
)

// TestDocsInstallTheCLI: the documented exit codes of the lockstep CLI
// (2 usage, 3 not found, 4 refused...) are lost under `go run`, which
// prints "exit status 4" and exits 1. So no document, doc comment or
// message a program prints tells the user to run the CLI with `go run`:
// the README installs it (go install, or go build -o) and shows
// `lockstep ...`. `go run` stays where the exit code does not matter: the
// demo and the README's two first commands, which must stay as they are.
func TestDocsInstallTheCLI(t *testing.T) {
	t.Chdir(systemtest.ModuleRoot(t)) // the paths below are the module's
	banned := []string{"go run ./cmd/lockstep", "go run github.com/lockstepgo/lockstep/cmd/lockstep", "go run cmd/lockstep"}
	var files []string
	for _, root := range []string{".", "examples", "cmd", "approval", "nodes", "graph", "checkpoint", "interrupt", "internal", "docs"} {
		if _, err := os.Stat(root); err != nil {
			continue // not in this checkout
		}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != root && (root == "." || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
					return filepath.SkipDir
				}
				return nil
			}
			if ext := filepath.Ext(path); (ext == ".md" || ext == ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, bad := range banned {
				if strings.Contains(line, bad) {
					t.Errorf("%s:%d tells the user to %q, which loses the CLI's exit codes: install it (go install ./cmd/lockstep) and show `lockstep ...`\n\t%s",
						path, i+1, bad, strings.TrimSpace(line))
				}
			}
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"go run ./examples/hotelbooking   # the demo", // the two first commands, unchanged
		"go test ./...                    # every test",
		"go install ./cmd/lockstep",
		"go build -o bin/lockstep ./cmd/lockstep",
		"lockstep approve ID --reviewer you",
	} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}
