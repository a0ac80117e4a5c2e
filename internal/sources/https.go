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
	"path/filepath"
)

// maxRedirects bounds the redirects an https fetch follows, all on the same host.
const maxRedirects = 5

// fetchHTTPS downloads a .tar.gz whose sha256 digest the request pins. The archive is
// hashed as it streams to a staging file within the byte cap; only an archive that matches
// its digest is extracted. A digest this source fetched before is not downloaded again.
func (f *fetcher) fetchHTTPS(ctx context.Context, req Request, id string) (*Artifact, error) {
	resolution := id + "@" + req.Digest
	revision := req.URL
	if e, ok := f.cache.lookupResolved(resolution); ok {
		return f.finish(id, "", revision, e, req.Path, false)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, errorf(ReasonInvalidSource, err, "%q is not a URL", req.URL)
	}
	staging, err := f.cache.staging()
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "preparing the cache")
	}
	defer os.RemoveAll(staging) //nolint:errcheck // insert moved it when it succeeded
	archive := filepath.Join(staging, "archive")
	sum, err := f.get(ctx, req, u, archive)
	if err != nil {
		return nil, err
	}
	if sum != req.Digest {
		return nil, errorf(ReasonDigestMismatch, nil, "%s is %s, not the pinned %s", u.Redacted(), sum, req.Digest)
	}
	if e, ok := f.cache.lookup(entryKey(KindHTTPS, sum)); ok {
		return f.finish(id, resolution, revision, e, req.Path, false)
	}
	tree := filepath.Join(staging, "tree")
	if err := mkdir(tree); err != nil {
		return nil, err
	}
	file, err := os.Open(archive)
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "reading the download")
	}
	err = Extract(file, tree, f.limits)
	_ = file.Close()
	if err != nil {
		return nil, err
	}
	if err := os.Remove(archive); err != nil {
		return nil, errorf(ReasonFetchFailed, err, "cleaning up the download")
	}
	e, err := f.cache.insert(staging, entryMeta{Kind: KindHTTPS, Digest: sum, Revision: revision})
	if err != nil {
		return nil, errorf(ReasonFetchFailed, err, "caching %s", u.Redacted())
	}
	return f.finish(id, resolution, revision, e, req.Path, false)
}

// get downloads req's URL to the file archive within the byte cap and returns its digest.
// Redirects are followed only on the same host and scheme.
func (f *fetcher) get(ctx context.Context, req Request, u *url.URL, archive string) (string, error) {
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
				return &redirectError{to: next.URL.Redacted()}
			}
			return nil
		},
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return "", errorf(ReasonInvalidSource, err, "%q", req.URL)
	}
	if req.Auth.Username != "" || req.Auth.Password != "" {
		hreq.SetBasicAuth(req.Auth.Username, req.Auth.Password)
	}
	resp, err := client.Do(hreq)
	if err != nil {
		var re *redirectError
		if errors.As(err, &re) {
			return "", errorf(ReasonFetchFailed, nil, "%s redirects to another host (%s); redirects are followed only on the same host", u.Redacted(), re.to)
		}
		return "", fetchError(err, "downloading %s", u.Redacted())
	}
	defer resp.Body.Close() //nolint:errcheck
	if resp.StatusCode != http.StatusOK {
		return "", fetchError(&httpStatusError{code: resp.StatusCode, status: resp.Status}, "downloading %s", u.Redacted())
	}
	if resp.ContentLength > f.limits.MaxBytes {
		return "", errorf(ReasonArchiveRefused, nil, "%s has %d bytes, more than the cap of %d", u.Redacted(), resp.ContentLength, f.limits.MaxBytes)
	}
	sum, err := download(resp.Body, archive, f.limits.MaxBytes)
	if err != nil {
		return "", errorOf(err, "downloading %s", u.Redacted())
	}
	return sum, nil
}

type redirectError struct{ to string }

func (e *redirectError) Error() string { return "redirect to another host: " + e.to }

// download writes r to file, at most maxBytes, and returns its "sha256:<hex>".
func download(r io.Reader, file string, maxBytes int64) (string, error) {
	out, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(r, maxBytes+1))
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
