package domain_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// SPEC §1's rules of dependency, checked on the source so that a violation
// fails the build's tests instead of waiting for a review. Tests run in
// their package's directory, so the paths are relative to domain/.

const modulePath = "github.com/dispatch-webhooks/dispatch"

// TestDomainImportsOnlyStandardLibrary: domain/ stays pure, testable and
// free to be imported by anything.
func TestDomainImportsOnlyStandardLibrary(t *testing.T) {
	t.Parallel()
	files := 0
	forEachImport(t, ".", false, func(file, _, path string) {
		files++
		// Standard library paths have no dot in their first element;
		// every module path does ("github.com/…").
		if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
			t.Errorf("%s imports %q: domain may import only the standard library", file, path)
		}
	})
	if files == 0 {
		t.Fatal("found no imports in domain/: is the test running in the domain directory?")
	}
}

// TestApplicationImportsNoAdapters: use cases depend on ports, never on a
// technology, and never on the composition root. The one exception is an
// external test package (package application_test), which is not part of
// application's import graph: it may wire the use cases on adapters/memory,
// the in-process adapters that exist for tests (SPEC §1), but not on a real
// technology or on bootstrap.
func TestApplicationImportsNoAdapters(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "application")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("application/ not found next to domain/: %v", err)
	}
	forEachImport(t, dir, true, func(file, pkg, path string) {
		if strings.HasSuffix(pkg, "_test") && within(path, modulePath+"/adapters/memory") {
			return
		}
		for _, forbidden := range []string{modulePath + "/adapters", modulePath + "/bootstrap"} {
			if within(path, forbidden) {
				t.Errorf("%s (package %s) imports %q: application may not depend on %s", file, pkg, path, strings.TrimPrefix(forbidden, modulePath+"/"))
			}
		}
	})
}

// within reports whether import path is root or a package below it.
func within(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+"/")
}

// forEachImport calls check for every import of every .go file under dir
// (test files too when withTests), with the file's package name, skipping
// testdata and hidden directories as the go tool does.
func forEachImport(t *testing.T, dir string, withTests bool, check func(file, pkg, path string)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if name != dir && (base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || !withTests && strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			check(name, f.Name.Name, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
