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
	"sync/atomic"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-billy/v5"
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
// tag, and for a commit where the server serves one by its hash) into a folder of its own,
// and writes the tree at the commit and path into the cache through the caps, refusing
// symbolic links and submodules. No worktree is checked out and no hook or filter runs.
// Every connection goes through the address filter, redirects are refused, and the bytes
// read from the server and the git objects written are capped (Limits.MaxTransferBytes).
func (f *fetcher) fetchGit(ctx context.Context, req Request, id string) (*Artifact, error) {
	shown := redactURL(req.URL)
	ep, err := transport.NewEndpoint(req.URL)
	if err != nil {
		return nil, errorf(ReasonInvalidSource, nil, "%q is not a git URL", shown)
	}
	switch {
	case ep.Protocol == schemeHTTPS, ep.Protocol == schemeSSH:
	case ep.Protocol == schemeHTTP && plainHTTPAllowed(req.Auth, ep.Host):
	default:
		return nil, errorf(ReasonInvalidSource, nil,
			"git URL %q: use https or ssh (plain http only to a loopback address, with insecure and insecureLoopback set)", shown)
	}
	work, err := f.cache.newStage()
	if err != nil {
		return nil, err
	}
	defer work.release()
	auth, err := gitAuth(req.Auth, ep, work.dir)
	if err != nil {
		return nil, err
	}
	s := newGitSession(req, ep, auth, f.limits.MaxTransferBytes)
	ctx = withGitFetch(ctx, &gitFetch{policy: s.policy, read: s.read})
	refName, commit, err := s.resolveRef(ctx)
	if err != nil {
		return nil, err
	}
	revision := "sha1:" + commit.String()
	if refName != "" {
		revision = refName.Short() + "@" + revision
	}
	if algorithm, hex, _ := cutDigest(req.Digest); algorithm == algoSHA1 && hex != commit.String() {
		return nil, errorf(ReasonDigestMismatch, nil, "%s resolves to commit %s, not the pinned %s", shown, commit, hex)
	}
	resolution := id + "@" + commit.String()
	if e, ok := f.cache.lookupResolved(resolution); ok {
		return f.finish(id, resolution, revision, e, "", false)
	}

	e, err := f.gitTree(ctx, s, refName, commit, revision, work)
	if err != nil {
		return nil, err
	}
	return f.finish(id, resolution, revision, e, "", false)
}

// gitSession is one git fetch: its request, its credentials, and the filter and caps its
// connections and its repository obey.
type gitSession struct {
	req    Request
	shown  string // the URL as messages show it
	auth   transport.AuthMethod
	policy addressPolicy
	// proxy is what makes go-git's SSH transport dial through the address filter; HTTP
	// connections get the filter from the fetch's context (network.go).
	proxy transport.ProxyOptions
	// read caps the bytes read from the server (HTTP: counted on the connections).
	read *byteBudget
	// stored caps the bytes of git objects written into the repository (every protocol).
	stored *byteBudget
	// failure is the first refusal of a write into the repository (the cap, or a cache
	// with no room): go-git need not keep it in the chain of the error it returns.
	failure atomic.Pointer[Error]
}

func newGitSession(req Request, ep *transport.Endpoint, auth transport.AuthMethod, maxBytes int64) *gitSession {
	s := &gitSession{req: req, shown: redactURL(req.URL), auth: auth, policy: addressPolicy{allowLoopback: req.Auth.InsecureLoopback},
		read:   newByteBudget(maxBytes, refused("the git server sent more than %d bytes, the cap of a git fetch", maxBytes)),
		stored: newByteBudget(maxBytes, refused("the git objects fetched are more than %d bytes, the cap of a git fetch", maxBytes))}
	if ep.Protocol == schemeSSH {
		s.proxy = sshProxyOptions(s.policy)
	}
	return s
}

// error classifies an error of go-git: a cap or a cache that refused a write, an address
// the filter refused, a refused redirect, else a FetchFailed (transient for network
// errors).
func (s *gitSession) error(err error, format string, args ...any) error {
	if f := s.failure.Load(); f != nil {
		return f
	}
	if s.read.exceeded() {
		return s.read.err
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	var re *gitRedirectError
	if errors.As(err, &re) || strings.Contains(err.Error(), "http redirect:") {
		// go-git's own refusal (a redirect of a later request) is a refusal all the same.
		return errorf(ReasonFetchFailed, err, format, args...)
	}
	return fetchError(err, format, args...)
}

// storage returns a repository at dir whose writes count against the stored cap and are
// charged to the cache first.
func (s *gitSession) storage(dir string, charge func(int64) error) *filesystem.Storage {
	count := func(n int64) error {
		err := s.stored.add(n)
		if err == nil {
			err = charge(n)
		}
		if err != nil {
			var se *Error
			if errors.As(err, &se) {
				s.failure.CompareAndSwap(nil, se)
			}
		}
		return err
	}
	return filesystem.NewStorage(&countedFS{Filesystem: osfs.New(dir), count: count}, gitcache.NewObjectLRUDefault())
}

// gitTree clones the commit into work and writes the tree at the request's path into the
// cache, checking a sha256 pin against the tree's digest.
func (f *fetcher) gitTree(ctx context.Context, s *gitSession, refName plumbing.ReferenceName,
	commit plumbing.Hash, revision string, work *stage) (*cacheEntry, error) {
	req := s.req
	repo, err := s.clone(ctx, refName, commit, s.storage(work.path("git"), work.charge))
	if err != nil {
		return nil, err
	}
	c, err := repo.CommitObject(commit)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "%s has no commit %s", s.shown, commit)
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
	st, err := f.cache.newStage()
	if err != nil {
		return nil, err
	}
	defer st.release()
	dir := st.path("tree")
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	if err := writeGitTree(ctx, newTreeWriter(dir, f.limits, st.charge), tree, "."); err != nil {
		return nil, err
	}
	digest, err := TreeDigest(dir)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "hashing the tree")
	}
	if algorithm, _, _ := cutDigest(req.Digest); algorithm == algoSHA256 && req.Digest != digest {
		return nil, errorf(ReasonDigestMismatch, nil, "the tree of %s is %s, not the pinned %s", revision, digest, req.Digest)
	}
	e, err := f.cache.insert(st, entryMeta{Kind: KindGit, Digest: digest, Revision: revision})
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "caching %s", revision)
	}
	return e, nil
}

// pinnedRef is where a commit fetched by its hash is kept in the fetch's repository.
const pinnedRef = "refs/kaddons/pinned"

// clone fetches refName (shallow) into storage, or, for a commit (no refName), that commit
// alone (shallow) from a server that serves a commit by its hash (it advertises
// allow-reachable-sha1-in-want or allow-tip-sha1-in-want), else every branch and tag,
// since the commit may be anywhere in their history; the transfer cap bounds that.
func (s *gitSession) clone(ctx context.Context, refName plumbing.ReferenceName, commit plumbing.Hash, storage *filesystem.Storage) (*git.Repository, error) {
	req := s.req
	if refName != "" {
		repo, err := git.CloneContext(ctx, storage, nil, &git.CloneOptions{URL: req.URL, Auth: s.auth, CABundle: req.Auth.CA,
			NoCheckout: true, Tags: git.NoTags, ReferenceName: refName, SingleBranch: true, Depth: 1, ProxyOptions: s.proxy})
		if err != nil {
			return nil, s.error(err, "cloning %s", s.shown)
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
	err = remote.FetchContext(ctx, &git.FetchOptions{Auth: s.auth, CABundle: req.Auth.CA, Tags: git.NoTags, Depth: 1,
		ProxyOptions: s.proxy, RefSpecs: []config.RefSpec{config.RefSpec(commit.String() + ":" + pinnedRef)}})
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		err = remote.FetchContext(ctx, &git.FetchOptions{Auth: s.auth, CABundle: req.Auth.CA, Tags: git.NoTags, ProxyOptions: s.proxy,
			RefSpecs: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"}})
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, s.error(err, "fetching %s", s.shown)
	}
	return repo, nil
}

// resolveRef lists the remote's refs and returns the one the request selects and its
// commit: Commit, else Tag, else the highest tag in the SemVer range, else Branch, else
// the remote's HEAD. A commit returns no ref name.
func (s *gitSession) resolveRef(ctx context.Context) (plumbing.ReferenceName, plumbing.Hash, error) {
	req := s.req
	g := req.Git
	if g.Commit != "" {
		if !commitPattern.MatchString(g.Commit) {
			return "", plumbing.ZeroHash, errorf(ReasonInvalidSource, nil, "commit %q is not a full lower-case sha1", g.Commit)
		}
		return "", plumbing.NewHash(g.Commit), nil
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{req.URL}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: s.auth, CABundle: req.Auth.CA, PeelingOption: git.AppendPeeled,
		ProxyOptions: s.proxy})
	if err != nil {
		return "", plumbing.ZeroHash, s.error(err, "listing the refs of %s", s.shown)
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
			return "", plumbing.ZeroHash, errorf(ReasonFetchFailed, nil, "%s has no tag in the range %q", s.shown, g.SemVer)
		}
	case g.Branch != "":
		name = plumbing.NewBranchReferenceName(g.Branch)
	case head != "":
		name = head
	default:
		return "", plumbing.ZeroHash, errorf(ReasonFetchFailed, nil, "%s has no default branch; name a branch, tag, range or commit", s.shown)
	}
	// The peeled commit of an annotated tag, else the ref's own hash.
	h, ok := hashes[name+"^{}"]
	if !ok {
		h, ok = hashes[name]
	}
	if !ok {
		return "", plumbing.ZeroHash, errorf(ReasonFetchFailed, nil, "%s has no %s", s.shown, name)
	}
	return name, h, nil
}

// countedFS is the file system of a git fetch's repository: every write is counted
// first, and refused when count refuses it.
type countedFS struct {
	billy.Filesystem
	count func(int64) error
}

func (fs *countedFS) Create(name string) (billy.File, error) {
	return fs.wrap(fs.Filesystem.Create(name))
}

func (fs *countedFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	return fs.wrap(fs.Filesystem.OpenFile(name, flag, perm))
}

func (fs *countedFS) TempFile(dir, prefix string) (billy.File, error) {
	return fs.wrap(fs.Filesystem.TempFile(dir, prefix))
}

func (fs *countedFS) Chroot(p string) (billy.Filesystem, error) {
	sub, err := fs.Filesystem.Chroot(p)
	if err != nil {
		return nil, err
	}
	return &countedFS{Filesystem: sub, count: fs.count}, nil
}

func (fs *countedFS) wrap(f billy.File, err error) (billy.File, error) {
	if err != nil {
		return nil, err
	}
	return &countedFile{File: f, count: fs.count}, nil
}

// countedFile counts each write before it makes it.
type countedFile struct {
	billy.File
	count func(int64) error
}

func (f *countedFile) Write(p []byte) (int, error) {
	if err := f.count(int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.Write(p)
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
	if ep.Protocol == schemeSSH {
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
