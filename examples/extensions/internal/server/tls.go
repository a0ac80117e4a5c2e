package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The files --self-signed-cert-dir holds.
const (
	CertFile = "cert.pem"
	KeyFile  = "key.pem"
)

// selfSignedValidity is how long a generated certificate is valid.
const selfSignedValidity = 365 * 24 * time.Hour

// certCheckInterval is how often the serving certificate's files are looked at for a
// new certificate (one renewed by cert-manager, say).
const certCheckInterval = 10 * time.Second

// EnsureSelfSigned returns the paths of cert.pem and key.pem in dir. When neither exists
// it writes a new self-signed certificate, without a CA, valid for names (IP addresses
// and DNS names) for a year, and its ECDSA P-256 key: cert.pem is then also what a client
// trusts, the caBundle of the AddonExtension. Existing files are kept as they are.
func EnsureSelfSigned(dir string, names []string) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	certExists, err := exists(certPath)
	if err != nil {
		return "", "", err
	}
	keyExists, err := exists(keyPath)
	if err != nil {
		return "", "", err
	}
	switch {
	case certExists && keyExists:
		return certPath, keyPath, nil
	case certExists != keyExists:
		return "", "", fmt.Errorf("%s holds only one of %s and %s: remove it to have a new pair generated", dir, CertFile, KeyFile)
	}
	certPEM, keyPEM, err := SelfSigned(names, time.Now())
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	// The key first: whoever sees cert.pem finds the pair complete.
	if err := writeAtomically(keyPath, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeAtomically(certPath, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// SelfSigned returns a self-signed serving certificate for names, not a CA, valid from
// an hour before now for a year, and its key, both PEM-encoded.
func SelfSigned(names []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	if len(names) == 0 {
		return nil, nil, errors.New("a certificate needs at least one name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generating a serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: names[0]},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, name := range names {
		if ip := net.ParseIP(name); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, name)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// writeAtomically writes data to path through a temporary file in the same folder.
func writeAtomically(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// certReloader serves the key pair of two files, and loads it again when either file
// changes, so that a renewed certificate is served without a restart.
type certReloader struct {
	certPath, keyPath string
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	certMod   time.Time
	keyMod    time.Time
	lastCheck time.Time
}

// newCertReloader loads the key pair; an error is one in the files.
func newCertReloader(certPath, keyPath string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certPath: certPath, keyPath: keyPath, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// load reads the key pair. Callers hold r.mu, or own r.
func (r *certReloader) load() error {
	certInfo, err := os.Stat(r.certPath)
	if err != nil {
		return err
	}
	keyInfo, err := os.Stat(r.keyPath)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certPath, r.keyPath)
	if err != nil {
		return fmt.Errorf("loading the serving certificate: %w", err)
	}
	r.cert, r.certMod, r.keyMod = &cert, certInfo.ModTime(), keyInfo.ModTime()
	return nil
}

// GetCertificate is the tls.Config hook: the current key pair, loaded again at most every
// certCheckInterval when a file changed. A pair that does not load keeps the one served.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.lastCheck) < certCheckInterval {
		return r.cert, nil
	}
	r.lastCheck = time.Now()
	certInfo, certErr := os.Stat(r.certPath)
	keyInfo, keyErr := os.Stat(r.keyPath)
	if certErr != nil || keyErr != nil || (certInfo.ModTime().Equal(r.certMod) && keyInfo.ModTime().Equal(r.keyMod)) {
		return r.cert, nil
	}
	if err := r.load(); err != nil {
		r.log.Error("keeping the serving certificate served so far", "error", err)
		return r.cert, nil
	}
	r.log.Info("loaded a new serving certificate", "cert", r.certPath)
	return r.cert, nil
}
