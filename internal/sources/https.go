package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
)

// maxRedirects bounds the redirects an https fetch follows, all on the same host.
const maxRedirects = 5

// fetchHTTPS downloads a .tar.gz whose sha256 digest the request pins. The archive is
// hashed as it streams to a staging file within the byte cap; only an archive that matches
// its digest is extracted. A digest this source fetched before is not downloaded again.
func (f *fetcher) fetchHTTPS(ctx context.Context, req Request, id string) (*Artifact, error) {
	resolution := id + "@" + req.Digest
	// validate refused a URL with credentials; redacting again costs nothing.
	revision := redactURL(req.URL)
	if e, ok := f.cache.lookupResolved(resolution); ok {
		return f.finish(id, "", revision, e, req.Path, false)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, errorf(ReasonInvalidSource, nil, "%q is not a URL", revision)
	}
	st, err := f.cache.newStage()
	if err != nil {
		return nil, err
	}
	defer st.release()
	archive := st.path("archive")
	sum, err := f.get(ctx, req, u, archive, st)
	if err != nil {
		return nil, err
	}
	if sum != req.Digest {
		return nil, errorf(ReasonDigestMismatch, nil, "%s is %s, not the pinned %s", revision, sum, req.Digest)
	}
	if e, ok := f.cache.lookup(entryKey(KindHTTPS, sum)); ok {
		return f.finish(id, resolution, revision, e, req.Path, false)
	}
	tree := st.path("tree")
	if err := mkdir(tree); err != nil {
		return nil, err
	}
	file, err := os.Open(archive)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "reading the download")
	}
	err = extractCharged(file, tree, f.limits, st.charge)
	_ = file.Close()
	if err != nil {
		return nil, err
	}
	if err := os.Remove(archive); err != nil {
		return nil, errorf(ReasonFetchFailed, err, "cleaning up the download")
	}
	e, err := f.cache.insert(st, entryMeta{Kind: KindHTTPS, Digest: sum, Revision: revision})
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "caching %s", revision)
	}
	return f.finish(id, resolution, revision, e, req.Path, false)
}

// get downloads req's URL to the file archive of st within the byte cap and returns its
// digest. Redirects are followed only on the same host and scheme.
func (f *fetcher) get(ctx context.Context, req Request, u *url.URL, archive string, st *stage) (string, error) {
	shown := redactURL(req.URL)
	t, err := f.transportFor(req.Auth)
	if err != nil {
		return "", err
	}
	client := &http.Client{
		Transport: t,
		CheckRedirect: func(next *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("more than %d redirects", maxRedirects)
			}
			if next.URL.Host != u.Host || next.URL.Scheme != u.Scheme {
				return &redirectError{to: redactURL(next.URL.String())}
			}
			return nil
		},
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return "", errorf(ReasonInvalidSource, nil, "%q is not a URL", shown)
	}
	if req.Auth.Username != "" || req.Auth.Password != "" {
		hreq.SetBasicAuth(req.Auth.Username, req.Auth.Password)
	}
	resp, err := client.Do(hreq)
	if err != nil {
		var re *redirectError
		if errors.As(err, &re) {
			return "", errorf(ReasonFetchFailed, nil, "%s redirects to another host (%s); redirects are followed only on the same host", shown, re.to)
		}
		return "", fetchError(err, "downloading %s", shown)
	}
	defer resp.Body.Close() //nolint:errcheck
	if resp.StatusCode != http.StatusOK {
		return "", fetchError(&httpStatusError{code: resp.StatusCode, status: resp.Status}, "downloading %s", shown)
	}
	if resp.ContentLength > f.limits.MaxBytes {
		return "", errorf(ReasonArchiveRefused, nil, "%s has %d bytes, more than the cap of %d", shown, resp.ContentLength, f.limits.MaxBytes)
	}
	sum, err := download(resp.Body, archive, f.limits.MaxBytes, st.charge)
	if err != nil {
		return "", errorOf(err, "downloading %s", shown)
	}
	return sum, nil
}

type redirectError struct{ to string }

func (e *redirectError) Error() string { return "redirect to another host: " + e.to }

// download writes r to file, at most maxBytes, each write charged first, and returns its
// "sha256:<hex>".
func download(r io.Reader, file string, maxBytes int64, charge func(int64) error) (string, error) {
	out, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(chargedWriter{w: out, charge: charge}, h), io.LimitReader(r, maxBytes+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if n > maxBytes {
		return "", refused("the archive is larger than the cap of %d bytes", maxBytes)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	return nil
}
