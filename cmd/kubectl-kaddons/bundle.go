package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
	"github.com/kaddons/kaddons/internal/version"
)

// bundleFlags are the bundle metadata flags build and push share.
type bundleFlags struct {
	operatorID         string
	minOperatorVersion string
	kubernetesVersions string
}

func (f *bundleFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.operatorID, "operator-id", "",
		"The id of the operator the bundle is meant for ("+sources.LabelOperatorID+"); empty: any operator.")
	cmd.Flags().StringVar(&f.minOperatorVersion, "min-operator-version", "",
		"The oldest operator version that may apply the bundle ("+sources.LabelMinOperatorVersion+"), such as v0.2.0.")
	cmd.Flags().StringVar(&f.kubernetesVersions, "kubernetes-versions", "",
		"The Kubernetes versions the bundle supports, a semver range ("+sources.LabelKubernetesVersions+"), such as '>=1.30.0 <1.36.0'.")
}

func (f *bundleFlags) options() publish.BuildOptions {
	return publish.BuildOptions{OperatorID: f.operatorID, MinOperatorVersion: f.minOperatorVersion,
		KubernetesVersions: f.kubernetesVersions}
}

func newBundleCommand(streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Build, push and verify channel bundles (OCI images in the Manifest Bundle format)",
		Long: "A bundle is a channels tree (channel files and packages/) packed as a single-layer OCI image, with its\n" +
			"metadata as labels and in metadata/annotations.yaml, that an AddonSource of kind oci pulls. See docs/bundles.md.",
	}
	cmd.AddCommand(newBundleBuildCommand(streams), newBundlePushCommand(streams), newBundleVerifyCommand(streams))
	return cmd
}

func newBundleBuildCommand(streams genericiooptions.IOStreams) *cobra.Command {
	var f bundleFlags
	var out string
	cmd := &cobra.Command{
		Use:   "build DIR -o OUT",
		Short: "Check a channels directory and pack it into a bundle in an OCI image layout",
		Example: `  kubectl kaddons bundle build channels/ -o bundle/
  kubectl kaddons bundle build channels/ -o bundle.tar --min-operator-version v0.2.0`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--output is required: an OCI layout directory, or a .tar file for an oci-archive")
			}
			img, _, err := publish.Build(args[0], f.options())
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if err := publish.WriteLayout(img, out); err != nil {
				return fmt.Errorf("writing %s: %w", out, err)
			}
			digest, err := img.Digest()
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintln(streams.Out, digest.String())
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "", "Where to write the bundle: an OCI image layout directory, or an oci-archive when it ends in .tar.")
	return cmd
}

func newBundlePushCommand(streams genericiooptions.IOStreams) *cobra.Command {
	var f bundleFlags
	var signKey string
	var insecure bool
	cmd := &cobra.Command{
		Use:   "push DIR REF",
		Short: "Build a bundle from a channels directory, push it, and sign it; prints the pushed reference by digest",
		Example: `  kubectl kaddons bundle push channels/ registry.example.com/platform/channels:v1
  COSIGN_PASSWORD=... kubectl kaddons bundle push channels/ registry.example.com/platform/channels:v1 --sign-key cosign.key`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var signerKey []byte
			if signKey != "" {
				var err error
				if signerKey, err = os.ReadFile(signKey); err != nil {
					return fmt.Errorf("reading --sign-key: %w", err)
				}
			}
			img, _, err := publish.Build(args[0], f.options())
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			reg := publish.RegistryOptions{Keychain: authn.DefaultKeychain, Insecure: insecure}
			ref, err := publish.Push(cmd.Context(), img, args[1], reg)
			if err != nil {
				return fmt.Errorf("pushing %s: %w", args[1], err)
			}
			if signerKey != nil {
				if err := signBundle(cmd.Context(), ref.String(), signerKey, reg); err != nil {
					return fmt.Errorf("pushed %s, but signing failed: %w", ref, err)
				}
			}
			_, _ = fmt.Fprintln(streams.Out, ref.String())
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&signKey, "sign-key", "",
		"A PEM private key (PKCS#8, EC or RSA, or cosign's encrypted key with COSIGN_PASSWORD) to sign the pushed bundle with, in cosign's key-based format.")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "Allow plain HTTP to the registry.")
	return cmd
}

// signBundle signs ref (by digest) with a PEM private key; COSIGN_PASSWORD decrypts a
// cosign key.
func signBundle(ctx context.Context, ref string, keyPEM []byte, reg publish.RegistryOptions) error {
	var password []byte
	if p, ok := os.LookupEnv("COSIGN_PASSWORD"); ok {
		password = []byte(p)
	}
	signer, err := publish.LoadSigner(keyPEM, password)
	if err != nil {
		return err
	}
	digest, err := publish.ParseDigest(ref, reg)
	if err != nil {
		return err
	}
	return publish.Sign(ctx, digest, signer, reg)
}

// verifyFlags are bundle verify's flags.
type verifyFlags struct {
	keys              []string
	caFile            string
	insecure          bool
	operatorID        string
	operatorVersion   string
	kubernetesVersion string
	digest            string
}

func newBundleVerifyCommand(streams genericiooptions.IOStreams) *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{
		Use:   "verify REF",
		Short: "Pull a bundle as the operator does: signature, digest, caps, metadata, content and pre-flight",
		Long: "verify pulls REF through the operator's own fetch path into a temporary cache: it checks the signature\n" +
			"against --key (when given), the digest pin, the extraction caps, the labels and metadata/annotations.yaml,\n" +
			"that every channel and package parses and renders, and, for the flags given, the pre-flight checks.\n" +
			"On a failure it prints the reason the operator would report (VerificationFailed, DigestMismatch,\n" +
			"OperatorTooOld, ...) and exits 1.",
		Example: `  kubectl kaddons bundle verify registry.example.com/platform/channels:v1 --key cosign.pub
  kubectl kaddons bundle verify registry.example.com/platform/channels@sha256:... --key cosign.pub --operator-version v0.2.0 --kubernetes-version v1.33.1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return verifyBundle(cmd.Context(), streams.Out, args[0], f)
		},
	}
	cmd.Flags().StringArrayVar(&f.keys, "key", nil, "A PEM public key the bundle's signature must verify against; repeat for several (any one suffices).")
	cmd.Flags().StringVar(&f.digest, "digest", "", "The sha256:<hex> manifest digest the bundle must have.")
	cmd.Flags().StringVar(&f.caFile, "ca-file", "", "A PEM bundle of extra certificate authorities for the registry.")
	cmd.Flags().BoolVar(&f.insecure, "insecure", false, "Allow plain HTTP to a loopback registry (as an AddonSource's insecure).")
	cmd.Flags().StringVar(&f.operatorID, "operator-id", "", "Check that the bundle is meant for this operator id.")
	cmd.Flags().StringVar(&f.operatorVersion, "operator-version", "", "Check that an operator of this version may apply the bundle.")
	cmd.Flags().StringVar(&f.kubernetesVersion, "kubernetes-version", "", "Check that the bundle supports this Kubernetes version.")
	return cmd
}

func verifyBundle(ctx context.Context, out io.Writer, ref string, f verifyFlags) error {
	// The plugin runs on the user's machine, whose loopback is the user's own, not a node's:
	// a registry there is allowed (link-local and metadata addresses are still refused).
	req := sources.Request{Kind: sources.KindOCI, URL: ref, Digest: f.digest,
		Auth: sources.Auth{Insecure: f.insecure, InsecureLoopback: true}}
	if f.caFile != "" {
		ca, err := os.ReadFile(f.caFile)
		if err != nil {
			return fmt.Errorf("reading --ca-file: %w", err)
		}
		req.Auth.CA = ca
	}
	if len(f.keys) > 0 {
		req.Verify = &sources.Verification{}
		for _, k := range f.keys {
			data, err := os.ReadFile(k)
			if err != nil {
				return fmt.Errorf("reading --key: %w", err)
			}
			req.Verify.PublicKeys = append(req.Verify.PublicKeys, data)
		}
	}
	cacheDir, err := os.MkdirTemp("", "kaddons-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir) //nolint:errcheck
	fetcher, err := sources.NewFetcher(sources.Options{CacheDir: cacheDir, Keychain: authn.DefaultKeychain})
	if err != nil {
		return err
	}
	a, err := fetcher.Fetch(ctx, req)
	if err != nil {
		return fmt.Errorf("%s: %w", sources.ReasonOf(err), err)
	}
	if err := publish.ValidateTree(a.Dir); err != nil {
		return fmt.Errorf("%s: the bundle's content: %w", sources.ReasonInvalidBundle, err)
	}
	// Only what the flags name is checked: a constraint left out of the check is not
	// satisfied, it is unknown.
	check := a.Metadata
	if f.operatorID == "" {
		check.OperatorID = ""
	}
	if f.operatorVersion == "" {
		check.MinOperatorVersion = ""
	}
	if f.kubernetesVersion == "" {
		check.KubernetesVersions = ""
	}
	if err := check.Check(f.operatorID, f.operatorVersion, f.kubernetesVersion); err != nil {
		return fmt.Errorf("%s: %w", sources.ReasonOf(err), err)
	}
	signature := "not checked (no --key)"
	if req.Verify != nil {
		signature = fmt.Sprintf("verified (%d key(s))", len(req.Verify.PublicKeys))
	}
	// The revision and the metadata come from the registry: printable.
	m := a.Metadata
	for _, line := range [][2]string{
		{"Bundle", ref},
		{"Revision", a.Revision},
		{"Digest", a.Digest},
		{"Signature", signature},
		{"Operator ID", cmp.Or(m.OperatorID, "any")},
		{"Min operator", cmp.Or(m.MinOperatorVersion, "any")},
		{"Kubernetes versions", cmp.Or(m.KubernetesVersions, "any")},
		{"Pre-flight", preflightSummary(f)},
	} {
		_, _ = fmt.Fprintf(out, "%-21s%s\n", line[0]+":", printable(line[1], keepNone))
	}
	return nil
}

func preflightSummary(f verifyFlags) string {
	var checked []string
	if f.operatorID != "" {
		checked = append(checked, "operator id "+f.operatorID)
	}
	if f.operatorVersion != "" {
		checked = append(checked, "operator "+f.operatorVersion)
	}
	if f.kubernetesVersion != "" {
		checked = append(checked, "Kubernetes "+f.kubernetesVersion)
	}
	if len(checked) == 0 {
		return "not checked (no --operator-id, --operator-version or --kubernetes-version; this plugin is " + version.Version + ")"
	}
	return "passed for " + strings.Join(checked, ", ")
}
