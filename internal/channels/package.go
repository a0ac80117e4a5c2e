package channels

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Caps on one package (packages/<addon>/<version>/ and its folders). A package that
// exceeds one is refused with ReasonPackageTooLarge, before it is built or, for the
// objects it renders, before anything is applied. The largest shipped package, the
// Dashboard's, has 15 files, 11 KiB and 16 objects; large real add-ons (a monitoring
// stack with its CRDs) have a few hundred objects and stay below 4 MiB.
const (
	// MaxPackageBytes caps the total size of a package's files.
	MaxPackageBytes = 8 << 20
	// MaxPackageFiles caps the number of files in a package, counting every folder.
	MaxPackageFiles = 512
	// MaxPackageObjects caps the YAML documents of a package that kustomize builds (its
	// kustomizations aside; the items of a List count one each) and the objects it
	// renders. kustomize's build time grows faster than the square of the object count
	// (about 1 s for 1000 ConfigMaps, 15 s for 2000, minutes for 5000 on a busy two-core
	// node), so the documents are counted before the build.
	MaxPackageObjects = 1000
	// MaxPlainPackageObjects caps the YAML documents and objects of a plain package, one
	// whose kustomization only lists its resource files (see plainResources). Such a
	// package is built without kustomize, in linear time, so its cap is the most objects
	// an add-on's inventory holds.
	MaxPlainPackageObjects = addonsv1alpha1.MaxInventoryObjects
	// maxPackageDepth caps how deeply a package's folders nest.
	maxPackageDepth = 16
)

// kustomizeCap and plainCap say, in a PackageTooLarge message, which object cap applies
// and why.
var (
	kustomizeCap = fmt.Sprintf("the cap on the objects of a package that kustomize builds, whose build time "+
		"grows faster than the square of the object count; a package whose kustomization.yaml holds nothing "+
		"but a resources list of its files may hold up to %d", MaxPlainPackageObjects)
	plainCap = "the cap on the objects of a plain package, whose kustomization.yaml only lists its files: " +
		"the most objects an add-on's inventory holds"
)

// packageFile is one regular file of a package: its slash-separated path inside the
// package and its content.
type packageFile struct {
	name string
	data []byte
}

// refusedf is a PackageRefused error of the package key (<addon>/<version>).
func refusedf(key, format string, args ...any) *Error {
	return errorf(addonsv1alpha1.ReasonPackageRefused, nil, "package %s: %s", key, fmt.Sprintf(format, args...))
}

// tooLargef is a PackageTooLarge error of the package key (<addon>/<version>).
func tooLargef(key, format string, args ...any) *Error {
	return errorf(addonsv1alpha1.ReasonPackageTooLarge, nil, "package %s: %s", key, fmt.Sprintf(format, args...))
}

// readPackage reads the files of the package at dir of fsys. It refuses a symbolic link
// anywhere in the package, the package folder included (os.DirFS would follow it out of
// the source), and anything that is neither a folder nor a regular file, and it stops as
// soon as the package exceeds MaxPackageFiles or MaxPackageBytes, before reading the
// rest. key names the package in errors.
func readPackage(fsys fs.FS, dir, key string) ([]packageFile, error) {
	for _, p := range []string{path.Dir(dir), dir} {
		info, err := fs.Lstat(fsys, p)
		if err != nil {
			return nil, errorf(addonsv1alpha1.ReasonRenderFailed, err, "reading package %s", key)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return nil, refusedf(key, "%s is a symbolic link; packages may not contain symbolic links", p)
		}
	}
	var (
		files []packageFile
		total int64
	)
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > maxPackageDepth {
			return refusedf(key, "%s: folders nest more than %d levels deep", path.Join(dir, rel), maxPackageDepth)
		}
		entries, err := fs.ReadDir(fsys, path.Join(dir, rel))
		if err != nil {
			return errorf(addonsv1alpha1.ReasonRenderFailed, err, "reading package %s", key)
		}
		for _, e := range entries {
			name := path.Join(rel, e.Name())
			full := path.Join(dir, name)
			switch {
			case e.Type()&fs.ModeSymlink != 0:
				return refusedf(key, "%s is a symbolic link; packages may not contain symbolic links", full)
			case e.IsDir():
				if err := walk(name, depth+1); err != nil {
					return err
				}
			case e.Type().IsRegular():
				if len(files) == MaxPackageFiles {
					return tooLargef(key, "more than %d files (the cap on a package's files)", MaxPackageFiles)
				}
				info, err := e.Info()
				if err != nil {
					return errorf(addonsv1alpha1.ReasonRenderFailed, err, "reading package %s", key)
				}
				if total+info.Size() > MaxPackageBytes {
					return tooLargef(key, "more than %d bytes (the cap on a package's size) at %s", MaxPackageBytes, full)
				}
				data, err := fs.ReadFile(fsys, full)
				if err != nil {
					return errorf(addonsv1alpha1.ReasonRenderFailed, err, "reading package %s", key)
				}
				// The file may have grown since it was listed.
				if total += int64(len(data)); total > MaxPackageBytes {
					return tooLargef(key, "more than %d bytes (the cap on a package's size) at %s", MaxPackageBytes, full)
				}
				files = append(files, packageFile{name: name, data: data})
			default:
				return refusedf(key, "%s is not a regular file (%s)", full, e.Type())
			}
		}
		return nil
	}
	if err := walk(".", 0); err != nil {
		return nil, err
	}
	return files, nil
}

// countDocuments counts the YAML documents of files, kustomizations aside, with the items
// of a List one each: an upper bound of the objects the package renders, besides what
// its generators make. Documents are split on "---" lines, as kustomize splits them; one
// that does not decode counts one, a scalar (a text file) none.
func countDocuments(files []packageFile) int {
	n := 0
	for _, f := range files {
		if slices.Contains(konfig.RecognizedKustomizationFileNames(), path.Base(f.name)) {
			continue
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(f.data)))
		for {
			chunk, err := reader.Read()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					n++
				}
				break
			}
			var doc any
			if err := yaml.Unmarshal(chunk, &doc); err != nil {
				n++
				continue
			}
			switch doc := doc.(type) {
			case map[string]any:
				if items, ok := doc["items"].([]any); ok {
					n += len(items)
				} else {
					n++
				}
			case []any:
				n += len(doc)
			}
		}
	}
	return n
}

// memoryFS writes files into a new in-memory file system under /dir. kustomize sees
// nothing else: not the add-on's other versions, not the rest of the source, not the
// disk.
func memoryFS(dir string, files []packageFile) (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	if err := mem.MkdirAll("/" + dir); err != nil {
		return nil, err
	}
	for _, f := range files {
		name := path.Join("/", dir, f.name)
		if err := mem.MkdirAll(path.Dir(name)); err != nil {
			return nil, err
		}
		if err := mem.WriteFile(name, f.data); err != nil {
			return nil, err
		}
	}
	return mem, nil
}

// renderOptions are kustomize's options for a package: loads stay inside the folder of
// the kustomization that names them, and only built-in plugins run (no exec or container
// functions, no Helm). These do not keep kustomize off the network: its loader fetches an
// http(s) resource and clones a git URL whatever the file system, so checkReferences
// refuses those before kustomize runs.
func renderOptions() *krusty.Options {
	o := krusty.MakeDefaultOptions()
	o.LoadRestrictions = types.LoadRestrictionsRootOnly
	o.PluginConfig = types.DisabledPluginConfig()
	return o
}

// scpUser matches the user@ that starts an scp-style git URL (git@github.com:org/repo),
// which kustomize clones.
var scpUser = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@`)

// remoteScheme matches a URL scheme (https://, ssh://, file://, s3://, ...).
var remoteScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://`)

// looksRemote reports whether kustomize could read ref from the network or another
// repository: a URL with a scheme, a go-getter "git::" prefix, an scp-style user@host,
// or github.com/ without a scheme (kustomize clones all of these).
func looksRemote(ref string) bool {
	s := strings.ToLower(strings.TrimSpace(ref))
	return remoteScheme.MatchString(s) || scpUser.MatchString(s) || strings.HasPrefix(s, "git::") ||
		strings.HasPrefix(s, "github.com/") || strings.HasPrefix(s, "github.com:")
}

// checkPath returns why ref, a file or folder that a kustomization or a built-in plugin
// loads, is not a relative path inside the package, or "" when it is.
func checkPath(ref string) string {
	switch {
	case looksRemote(ref):
		return "is a remote reference; packages may only load their own files"
	case strings.Contains(ref, ":"):
		return "contains ':' (a URL or scp-style git reference); packages may only load their own files"
	case strings.HasPrefix(strings.TrimSpace(ref), "/"):
		return "is an absolute path; packages may only load their own files"
	case slices.Contains(strings.Split(ref, "/"), ".."):
		return "contains '..'; packages may only load their own files"
	}
	return ""
}

// yamlMaps decodes data as a stream of YAML (or JSON) documents and returns the mappings
// among them. ok is false unless it holds at least one document and every document is a
// mapping: that is when kustomize takes a generator, transformer or patch entry as inline
// content rather than a path.
func yamlMaps(data []byte) (docs []map[string]any, ok bool) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	ok = true
	for {
		var doc any
		if err := decoder.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return docs, ok && len(docs) > 0
			}
			return docs, false
		}
		if doc == nil {
			continue
		}
		m, isMap := doc.(map[string]any)
		if !isMap {
			ok = false
			continue
		}
		docs = append(docs, m)
	}
}

// builtinFileKeys are the fields of kustomize's built-in plugin configurations that name
// a file to load (PatchTransformer's path, ConfigMapGenerator's files, ...).
var builtinFileKeys = map[string]bool{
	"path": true, "paths": true, "files": true, "envs": true, "env": true,
	"targetFilePath": true, "valuesFile": true, "additionalValuesFiles": true, "chartHome": true,
}

// checkReferences refuses a package whose kustomizations or built-in plugin
// configurations refer to anything outside the package: a remote base or file (http,
// https, git, ssh, github.com/...), an absolute path, a path through "..", or a Helm
// chart. kustomize would fetch a remote reference even on an in-memory file system, so
// this runs before it sees the package.
func checkReferences(key string, files []packageFile) error {
	for _, f := range files {
		if slices.Contains(konfig.RecognizedKustomizationFileNames(), path.Base(f.name)) {
			var k types.Kustomization
			// kustomize decodes the same way; a file that does not decode fails the build
			// there, with kustomize's message, if the build reaches it.
			if err := k.Unmarshal(f.data); err == nil {
				if err := checkKustomization(key, f.name, &k); err != nil {
					return err
				}
			}
			continue
		}
		if !bytes.Contains(f.data, []byte(konfig.BuiltinPluginApiVersion)) {
			continue
		}
		if docs, ok := yamlMaps(f.data); ok {
			if err := checkPluginConfigs(key, f.name, docs); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkKustomization checks every field of one kustomization that names something to
// load.
func checkKustomization(key, file string, k *types.Kustomization) error {
	if len(k.HelmCharts) > 0 || len(k.HelmChartInflationGenerator) > 0 || k.HelmGlobals != nil {
		return refusedf(key, "%s uses a Helm chart; packages must hold rendered manifests", file)
	}
	check := func(field, ref string) error {
		if why := checkPath(ref); why != "" {
			return refusedf(key, "%s: %s entry %q %s", file, field, ref, why)
		}
		return nil
	}
	// inlineOrPath checks an entry that kustomize reads as inline YAML when it decodes
	// as such, and as a path otherwise.
	inlineOrPath := func(field, entry string) error {
		if looksRemote(entry) {
			return refusedf(key, "%s: %s entry %q is a remote reference; packages may only load their own files",
				file, field, firstLine(entry))
		}
		if docs, ok := yamlMaps([]byte(entry)); ok {
			return checkPluginConfigs(key, file, docs)
		}
		return check(field, entry)
	}

	for _, list := range pathFields(k) {
		for _, ref := range list.entries {
			if err := check(list.field, ref); err != nil {
				return err
			}
		}
	}
	for _, list := range inlineFields(k) {
		for _, entry := range list.entries {
			if err := inlineOrPath(list.field, entry); err != nil {
				return err
			}
		}
	}
	for field, generators := range map[string][]types.GeneratorArgs{
		"configMapGenerator": configMapArgs(k.ConfigMapGenerator), "secretGenerator": secretArgs(k.SecretGenerator),
	} {
		for _, g := range generators {
			for _, ref := range generatorFiles(g.KvPairSources) {
				if err := check(field, ref); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fieldEntries is one field of a kustomization and the entries it names.
type fieldEntries struct {
	field   string
	entries []string
}

// pathFields returns every field of k whose entries kustomize loads as paths. The
// deprecated fields are included: kustomize still loads them.
func pathFields(k *types.Kustomization) []fieldEntries {
	fields := []fieldEntries{
		{"resources", k.Resources},
		{"bases", k.Bases}, //nolint:staticcheck // deprecated, but kustomize still loads it
		{"components", k.Components},
		{"crds", k.Crds},
		{"configurations", k.Configurations},
	}
	patches := fieldEntries{field: "patches"}
	for _, p := range k.Patches {
		patches.entries = append(patches.entries, p.Path)
	}
	json6902 := fieldEntries{field: "patchesJson6902"}
	for _, p := range k.PatchesJson6902 { //nolint:staticcheck // deprecated, but kustomize still loads it
		json6902.entries = append(json6902.entries, p.Path)
	}
	replacements := fieldEntries{field: "replacements"}
	for _, r := range k.Replacements {
		replacements.entries = append(replacements.entries, r.Path)
	}
	fields = append(fields, patches, json6902, replacements)
	if p, ok := k.OpenAPI["path"]; ok {
		fields = append(fields, fieldEntries{"openapi", []string{p}})
	}
	return fields
}

// inlineFields returns every field of k whose entries kustomize reads as inline YAML
// when they decode as such, and as paths otherwise.
func inlineFields(k *types.Kustomization) []fieldEntries {
	smp := fieldEntries{field: "patchesStrategicMerge"}
	for _, p := range k.PatchesStrategicMerge { //nolint:staticcheck // deprecated, but kustomize still loads it
		smp.entries = append(smp.entries, string(p))
	}
	return []fieldEntries{
		{"generators", k.Generators}, {"transformers", k.Transformers}, {"validators", k.Validators}, smp,
	}
}

// configMapArgs returns the generator arguments of ConfigMap generators.
func configMapArgs(args []types.ConfigMapArgs) []types.GeneratorArgs {
	out := make([]types.GeneratorArgs, 0, len(args))
	for _, a := range args {
		out = append(out, a.GeneratorArgs)
	}
	return out
}

// secretArgs returns the generator arguments of Secret generators.
func secretArgs(args []types.SecretArgs) []types.GeneratorArgs {
	out := make([]types.GeneratorArgs, 0, len(args))
	for _, a := range args {
		out = append(out, a.GeneratorArgs)
	}
	return out
}

// generatorFiles lists the files a generator reads: files (as path or key=path), envs
// and env.
func generatorFiles(kv types.KvPairSources) []string {
	var refs []string
	for _, f := range kv.FileSources {
		if _, p, found := strings.Cut(f, "="); found {
			f = p
		}
		refs = append(refs, f)
	}
	refs = append(refs, kv.EnvSources...)
	if kv.EnvSource != "" {
		refs = append(refs, kv.EnvSource)
	}
	return refs
}

// checkPluginConfigs checks the built-in plugin configurations (apiVersion: builtin)
// among docs: Helm is refused, and every file they name must be inside the package.
func checkPluginConfigs(key, file string, docs []map[string]any) error {
	for _, doc := range docs {
		if doc["apiVersion"] != konfig.BuiltinPluginApiVersion {
			continue
		}
		if kind, _ := doc["kind"].(string); strings.HasPrefix(kind, "Helm") {
			return refusedf(key, "%s: the built-in %s runs Helm; packages must hold rendered manifests", file, kind)
		}
		if err := checkPluginValue(key, file, "", doc); err != nil {
			return err
		}
	}
	return nil
}

// checkPluginValue walks a plugin configuration and checks the strings under the keys
// that name files.
func checkPluginValue(key, file, field string, v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if err := checkPluginValue(key, file, k, child); err != nil {
				return err
			}
		}
	case []any:
		for _, child := range v {
			if err := checkPluginValue(key, file, field, child); err != nil {
				return err
			}
		}
	case string:
		if !builtinFileKeys[field] {
			return nil
		}
		if looksRemote(v) {
			return refusedf(key, "%s: %s %q is a remote reference; packages may only load their own files",
				file, field, firstLine(v))
		}
		// PatchStrategicMergeTransformer's paths may hold inline patches.
		if _, inline := yamlMaps([]byte(v)); inline && field == "paths" {
			return nil
		}
		ref := v
		if field == "files" {
			if _, p, found := strings.Cut(v, "="); found {
				ref = p
			}
		}
		if why := checkPath(ref); why != "" {
			return refusedf(key, "%s: %s %q %s", file, field, ref, why)
		}
	}
	return nil
}

// firstLine shortens an inline entry to its first line for an error message.
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
