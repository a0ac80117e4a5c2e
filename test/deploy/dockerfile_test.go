// Package deploy tests what ships the operator, without a cluster: the Dockerfile's build
// context and the installer's Deployment (dist/install.yaml).
package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var repoRoot = filepath.Join("..", "..")

// dockerignore is a parsed .dockerignore: patterns in order, later ones winning.
type dockerignore []ignoreRule

type ignoreRule struct {
	pattern string
	include bool // a "!" rule lets matching paths back in
}

// parseDockerignore reads .dockerignore rules as Docker does: comments and blank lines
// are skipped, patterns are cleaned and made relative, "!" re-includes.
func parseDockerignore(t *testing.T, text string) dockerignore {
	t.Helper()
	var rules dockerignore
	scanner := bufio.NewScanner(strings.NewReader(text))
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if r.pattern, r.include = strings.CutPrefix(line, "!"); r.include {
			r.pattern = strings.TrimSpace(r.pattern)
		}
		if strings.Contains(r.pattern, "**") {
			t.Fatalf(".dockerignore pattern %q: this check does not implement **", line)
		}
		r.pattern = strings.TrimPrefix(path.Clean(r.pattern), "/")
		rules = append(rules, r)
	}
	return rules
}

// excluded tells whether Docker leaves the file name (slash-separated, relative to the
// context) out of the build context. A pattern matches a path or any folder above it.
func (d dockerignore) excluded(name string) bool {
	out := false
	for _, r := range d {
		if matchesOrParent(r.pattern, name) {
			out = !r.include
		}
	}
	return out
}

func matchesOrParent(pattern, name string) bool {
	for p := name; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		if ok, _ := path.Match(pattern, p); ok {
			return true
		}
	}
	return false
}

// copySources returns the source paths of the Dockerfile's COPY instructions that read
// the build context (not --from another stage).
func copySources(t *testing.T, dockerfile string) []string {
	t.Helper()
	var sources []string
	joined := strings.ReplaceAll(dockerfile, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || !strings.EqualFold(fields[0], "COPY") {
			continue
		}
		args := fields[1:]
		fromStage := false
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			fromStage = fromStage || strings.HasPrefix(args[0], "--from")
			args = args[1:]
		}
		if fromStage || len(args) < 2 {
			continue
		}
		sources = append(sources, args[:len(args)-1]...)
	}
	return sources
}

// TestDockerfileCopiesOnlyTheBuildContext checks that every file under every path the
// Dockerfile copies gets through .dockerignore, so `docker build` finds what it copies.
func TestDockerfileCopiesOnlyTheBuildContext(t *testing.T) {
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	rules := parseDockerignore(t, string(ignore))
	sources := copySources(t, string(dockerfile))
	if len(sources) < 3 {
		t.Fatalf("found only the COPY sources %v in the Dockerfile", sources)
	}
	for _, src := range sources {
		rel := strings.TrimPrefix(path.Clean(src), "/")
		files := trackedFiles(t, rel)
		if len(files) == 0 {
			t.Errorf("COPY %s: the repository has no such file or folder", src)
		}
		for _, f := range files {
			if rules.excluded(f) {
				t.Errorf("COPY %s: .dockerignore leaves %s out of the build context", src, f)
			}
		}
	}
}

// TestDockerfileCopiesWhatTheManagerImports checks that every package of the repository
// that the manager's main package needs lies under a path the Dockerfile copies.
func TestDockerfileCopiesWhatTheManagerImports(t *testing.T) {
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	sources := copySources(t, string(dockerfile))
	cmd := exec.Command("go", "list", "-e", "-deps", "-tags", "without_exec_applier,without_direct_applier",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/kaddons/kaddons"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != module && !strings.HasPrefix(pkg, module+"/") {
			continue
		}
		dir := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		copied := false
		for _, src := range sources {
			src = strings.TrimSuffix(path.Clean(src), "/")
			if dir == "" && src == "main.go" || dir == src || strings.HasPrefix(dir, src+"/") {
				copied = true
			}
		}
		if !copied {
			t.Errorf("the manager needs %s, which no COPY of the Dockerfile brings in", pkg)
		}
	}
	// The main package lies in the root, which the Dockerfile copies file by file.
	cmd = exec.Command("go", "list", "-tags", "without_exec_applier,without_direct_applier", "-f", "{{join .GoFiles \" \"}}", ".")
	cmd.Dir = repoRoot
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, file := range strings.Fields(string(out)) {
		if !slices.ContainsFunc(sources, func(src string) bool { return path.Clean(src) == file }) {
			t.Errorf("the manager's main package has %s, which no COPY of the Dockerfile brings in", file)
		}
	}
}

// trackedFiles lists the files git tracks under rel, or the file rel itself, plus the
// untracked ones that are not ignored (new files about to be committed).
func trackedFiles(t *testing.T, rel string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "--", rel)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}

func TestDockerignoreRules(t *testing.T) {
	rules := parseDockerignore(t, "# comment\n*\n!go.mod\n!api/\n!internal/\ninternal/secret*\n")
	for name, want := range map[string]bool{
		"go.mod":                   false,
		"main.go":                  true,
		"api/v1alpha1/types.go":    false,
		"internal/engine/apply.go": false,
		"internal/secret.txt":      true,
		"controllers/x.go":         true,
	} {
		if got := rules.excluded(name); got != want {
			t.Errorf("excluded(%s) = %v, want %v", name, got, want)
		}
	}
}
