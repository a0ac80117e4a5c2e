package sources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	gitcache "github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// fetchGit resolves the request's ref with one ls-remote; a commit this source fetched
// before is not cloned again. Otherwise it clones only that ref (shallow for a branch or
// tag) into a folder of its own, and writes the tree at the commit and path into the cache
// through the caps, refusing symbolic links and submodules. No worktree is checked out and
// no hook or filter runs.
func (f *fetcher) fetchGit(ctx context.Context, req Request, id string) (*Artifact, error) {
	ep, err := transport.NewEndpoint(req.URL)
	if err != nil {
		return nil, errorf(ReasonInvalidSource, err, "%q is not a git URL", req.URL)
	}
	switch {
	case ep.Protocol == schemeHTTPS, ep.Protocol == "ssh":
	case ep.Protocol == "http" && req.Auth.Insecure && isLoopback(ep.Host):
	default:
		return nil, errorf(ReasonInvalidSource, nil, "git URL %q: use https or ssh (plain http only to a loopback address with insecure set)", req.URL)
	}
	work, err := f.cache.staging()
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	defer os.RemoveAll(work) //nolint:errcheck
	auth, err := gitAuth(req.Auth, ep, work)
	if err != nil {
		return nil, err
	}
	refName, commit, err := resolveGitRef(ctx, req, auth)
	if err != nil {
		return nil, err
	}
	revision := "sha1:" + commit.String()
	if refName != "" {
		revision = refName.Short() + "@" + revision
	}
	if algorithm, hex, _ := cutDigest(req.Digest); algorithm == algoSHA1 && hex != commit.String() {
		return nil, errorf(ReasonDigestMismatch, nil, "%s resolves to commit %s, not the pinned %s", req.URL, commit, hex)
	}
	resolution := id + "@" + commit.String()
	if e, ok := f.cache.lookupResolved(resolution); ok {
		return f.finish(id, resolution, revision, e, "", false)
	}

	e, err := f.gitTree(ctx, req, auth, refName, commit, revision, work)
	if err != nil {
		return nil, err
	}
	return f.finish(id, resolution, revision, e, "", false)
}

// gitTree clones the commit into work and writes the tree at the request's path into the
// cache, checking a sha256 pin against the tree's digest.
func (f *fetcher) gitTree(ctx context.Context, req Request, auth transport.AuthMethod, refName plumbing.ReferenceName,
	commit plumbing.Hash, revision, work string) (*cacheEntry, error) {
	repo, err := gitClone(ctx, req, auth, refName, filepath.Join(work, "git"))
	if err != nil {
		return nil, err
	}
	c, err := repo.CommitObject(commit)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "%s has no commit %s", req.URL, commit)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "reading commit %s", commit)
	}
	if req.Path != "" && path.Clean(req.Path) != "." {
		if tree, err = tree.Tree(path.Clean(req.Path)); err != nil {
			return nil, errorf(ReasonInvalidBundle, err, "commit %s has no folder %q", commit, req.Path)
		}
	}
	staging, err := f.cache.staging()
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	defer os.RemoveAll(staging) //nolint:errcheck
	dir := filepath.Join(staging, "tree")
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	if err := writeGitTree(ctx, newTreeWriter(dir, f.limits), tree, "."); err != nil {
		return nil, err
	}
	digest, err := TreeDigest(dir)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "hashing the tree")
	}
	if algorithm, _, _ := cutDigest(req.Digest); algorithm == algoSHA256 && req.Digest != digest {
		return nil, errorf(ReasonDigestMismatch, nil, "the tree of %s is %s, not the pinned %s", revision, digest, req.Digest)
	}
	e, err := f.cache.insert(staging, entryMeta{Kind: KindGit, Digest: digest, Revision: revision})
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "caching %s", revision)
	}
	return e, nil
}

// gitClone fetches refName (shallow) into a bare repository at dir, or, for a commit
// (no refName), every branch and tag, since servers need not serve an arbitrary commit.
func gitClone(ctx context.Context, req Request, auth transport.AuthMethod, refName plumbing.ReferenceName, dir string) (*git.Repository, error) {
	storage := filesystem.NewStorage(osfs.New(dir), gitcache.NewObjectLRUDefault())
	if refName != "" {
		repo, err := git.CloneContext(ctx, storage, nil, &git.CloneOptions{URL: req.URL, Auth: auth, CABundle: req.Auth.CA,
			NoCheckout: true, Tags: git.NoTags, ReferenceName: refName, SingleBranch: true, Depth: 1})
		if err != nil {
			return nil, fetchError(err, "cloning %s", req.URL)
		}
		return repo, nil
	}
	repo, err := git.Init(storage, nil)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "preparing a repository")
	}
	remote, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{req.URL}})
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "preparing a repository")
	}
	err = remote.FetchContext(ctx, &git.FetchOptions{Auth: auth, CABundle: req.Auth.CA, Tags: git.NoTags,
		RefSpecs: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"}})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, fetchError(err, "fetching %s", req.URL)
	}
	return repo, nil
}

// resolveGitRef lists the remote's refs and returns the one the request selects and its
// commit: Commit, else Tag, else the highest tag in the SemVer range, else Branch, else
// the remote's HEAD. A commit returns no ref name.
func resolveGitRef(ctx context.Context, req Request, auth transport.AuthMethod) (plumbing.ReferenceName, plumbing.Hash, error) {
	g := req.Git
	if g.Commit != "" {
		if !commitPattern.MatchString(g.Commit) {
			return "", plumbing.ZeroHash, errorf(ReasonInvalidSource, nil, "commit %q is not a full lower-case sha1", g.Commit)
		}
		return "", plumbing.NewHash(g.Commit), nil
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{req.URL}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth, CABundle: req.Auth.CA, PeelingOption: git.AppendPeeled})
	if err != nil {
		return "", plumbing.ZeroHash, fetchError(err, "listing the refs of %s", req.URL)
	}
	hashes, head := listedRefs(refs)
	var name plumbing.ReferenceName
	switch {
	case g.Tag != "":
		name = plumbing.NewTagReferenceName(g.Tag)
	case g.SemVer != "":
		constraint, err := semver.NewConstraint(g.SemVer)
		if err != nil {
			return "", plumbing.ZeroHash, errorf(ReasonInvalidSource, err, "semver range %q", g.SemVer)
		}
		if name = highestTag(hashes, constraint); name == "" {
			return "", plumbing.ZeroHash, errorf(ReasonFetchFailed, nil, "%s has no tag in the range %q", req.URL, g.SemVer)
		}
	case g.Branch != "":
		name = plumbing.NewBranchReferenceName(g.Branch)
	case head != "":
		name = head
	default:
		return "", plumbing.ZeroHash, errorf(ReasonFetchFailed, nil, "%s has no default branch; name a branch, tag, range or commit", req.URL)
	}
	// The peeled commit of an annotated tag, else the ref's own hash.
	h, ok := hashes[name+"^{}"]
	if !ok {
		h, ok = hashes[name]
	}
	if !ok {
		return "", plumbing.ZeroHash, errorf(ReasonFetchFailed, nil, "%s has no %s", req.URL, name)
	}
	return name, h, nil
}

// listedRefs returns the hashes of a remote's refs and the branch its HEAD names.
func listedRefs(refs []*plumbing.Reference) (map[plumbing.ReferenceName]plumbing.Hash, plumbing.ReferenceName) {
	hashes := map[plumbing.ReferenceName]plumbing.Hash{}
	var head plumbing.ReferenceName
	for _, r := range refs {
		switch {
		case r.Name() == plumbing.HEAD && r.Type() == plumbing.SymbolicReference:
			head = r.Target()
		case r.Type() == plumbing.HashReference:
			hashes[r.Name()] = r.Hash()
		}
	}
	if h, ok := hashes[plumbing.HEAD]; ok && head == "" {
		// A server that does not say which branch HEAD is: the branch at the same commit.
		var names []string
		for n, nh := range hashes {
			if n.IsBranch() && nh == h {
				names = append(names, string(n))
			}
		}
		if sort.Strings(names); len(names) > 0 {
			head = plumbing.ReferenceName(names[0])
		}
	}
	return hashes, head
}

// highestTag returns the tag with the highest semantic version in the range, or "".
func highestTag(hashes map[plumbing.ReferenceName]plumbing.Hash, constraint *semver.Constraints) plumbing.ReferenceName {
	var best *semver.Version
	var name plumbing.ReferenceName
	for n := range hashes {
		if !n.IsTag() || strings.HasSuffix(string(n), "^{}") {
			continue
		}
		v, err := semver.NewVersion(n.Short())
		if err != nil || !constraint.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) || (v.Equal(best) && n.Short() > name.Short()) {
			best, name = v, n
		}
	}
	return name
}

// gitAuth returns the credentials of a git request: a key with known_hosts for ssh (the
// host key is always checked), basic auth (a token in Password) for https.
func gitAuth(a Auth, ep *transport.Endpoint, work string) (transport.AuthMethod, error) {
	if ep.Protocol == "ssh" {
		if len(a.SSHPrivateKey) == 0 {
			return nil, errorf(ReasonInvalidSource, nil, "an ssh git URL needs a private key")
		}
		if len(a.KnownHosts) == 0 {
			return nil, errorf(ReasonInvalidSource, nil, "an ssh git URL needs known_hosts: the server's host key is always checked")
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, a.SSHPrivateKey, "")
		if err != nil {
			return nil, errorf(ReasonInvalidSource, err, "the ssh private key")
		}
		file := filepath.Join(work, "known_hosts")
		if err := os.WriteFile(file, a.KnownHosts, 0o600); err != nil {
			return nil, errorf(ReasonFetchFailed, err, "writing known_hosts")
		}
		db, err := gitssh.NewKnownHostsDb(file)
		if err != nil {
			return nil, errorf(ReasonInvalidSource, err, "known_hosts")
		}
		keys.HostKeyCallback = db.HostKeyCallback()
		port := ep.Port
		if port == 0 {
			port = 22
		}
		keys.HostKeyAlgorithms = db.HostKeyAlgorithms(fmt.Sprintf("%s:%d", ep.Host, port))
		return keys, nil
	}
	if len(a.SSHPrivateKey) > 0 {
		return nil, errorf(ReasonInvalidSource, nil, "an ssh private key needs an ssh git URL")
	}
	if a.Username == "" && a.Password == "" {
		return nil, nil
	}
	user := a.Username
	if user == "" {
		user = "git" // a token as the password; servers ignore the user name
	}
	return &githttp.BasicAuth{Username: user, Password: a.Password}, nil
}

// writeGitTree writes the files of tree into w under rel.
func writeGitTree(ctx context.Context, w *treeWriter, tree *object.Tree, rel string) error {
	for _, e := range tree.Entries {
		if err := ctx.Err(); err != nil {
			return fetchError(err, "reading the tree")
		}
		name := path.Join(rel, e.Name)
		switch e.Mode {
		case filemode.Dir:
			sub, err := tree.Tree(e.Name)
			if err != nil {
				return errorf(ReasonFetchFailed, err, "reading %s", name)
			}
			if err := w.Dir(name + "/"); err != nil {
				return err
			}
			if err := writeGitTree(ctx, w, sub, name); err != nil {
				return err
			}
		case filemode.Regular, filemode.Deprecated, filemode.Executable:
			file, err := tree.TreeEntryFile(&e)
			if err != nil {
				return errorf(ReasonFetchFailed, err, "reading %s", name)
			}
			if file.Size > w.limits.MaxBytes {
				return refused("%s has %d bytes, more than the cap of %d", name, file.Size, w.limits.MaxBytes)
			}
			r, err := file.Reader()
			if err != nil {
				return errorf(ReasonFetchFailed, err, "reading %s", name)
			}
			err = w.File(name, r)
			_ = r.Close()
			if err != nil {
				return err
			}
		case filemode.Symlink:
			return refused("%s is a symbolic link", name)
		case filemode.Submodule:
			return refused("%s is a submodule", name)
		default:
			return refused("%s has the unsupported mode %s", name, e.Mode)
		}
	}
	return nil
}
