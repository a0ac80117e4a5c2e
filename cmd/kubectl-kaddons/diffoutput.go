package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Values of diff's --color.
const (
	colorAuto   = "auto"
	colorAlways = "always"
	colorNever  = "never"
)

// useColor reports whether diff colours its output to out for the --color value mode:
// with auto, when out is a terminal and neither NO_COLOR is set nor TERM is dumb.
func useColor(mode string, out io.Writer) (bool, error) {
	switch mode {
	case colorAlways:
		return true, nil
	case colorNever:
		return false, nil
	case colorAuto:
		if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
			return false, nil
		}
		f, ok := out.(*os.File)
		if !ok {
			return false, nil
		}
		info, err := f.Stat()
		return err == nil && info.Mode()&os.ModeCharDevice != 0, nil
	}
	return false, fmt.Errorf("--color must be auto, always or never, not %q", printable(mode, keepNone))
}

// ANSI sequences that colour diff lines. They are the plugin's own: what the cluster
// provided went through printable before.
const (
	ansiReset = "\x1b[0m"
	ansiBold  = "\x1b[1m"
	ansiRed   = "\x1b[31m"
	ansiGreen = "\x1b[32m"
	ansiCyan  = "\x1b[36m"
)

// writeDiffs writes the unified diff of every object that differs to w, coloured when
// colored, and reports whether any differs.
func writeDiffs(w io.Writer, diffs []objectDiff, colored bool) (bool, error) {
	differs := false
	for _, d := range diffs {
		text, err := d.unified()
		if err != nil {
			return false, err
		}
		if text == "" {
			continue
		}
		differs = true
		text = printable(text, keepLines)
		if colored {
			text = colorize(text)
		}
		if _, err := io.WriteString(w, text); err != nil {
			return false, err
		}
	}
	return differs, nil
}

// colorize colours a unified diff as git does: headers bold, hunk ranges cyan, removed
// lines red, added lines green.
func colorize(diff string) string {
	lines := strings.SplitAfter(diff, "\n")
	var b strings.Builder
	for _, line := range lines {
		if line == "" {
			continue
		}
		text, newline := strings.CutSuffix(line, "\n")
		color := ""
		switch {
		case strings.HasPrefix(text, "--- "), strings.HasPrefix(text, "+++ "):
			color = ansiBold
		case strings.HasPrefix(text, "@@"):
			color = ansiCyan
		case strings.HasPrefix(text, "-"):
			color = ansiRed
		case strings.HasPrefix(text, "+"):
			color = ansiGreen
		}
		if color != "" {
			text = color + text + ansiReset
		}
		b.WriteString(text)
		if newline {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// externalArg is an argument of KUBECTL_EXTERNAL_DIFF that kubectl passes on: letters,
// digits, dashes and equal signs only.
var externalArg = regexp.MustCompile(`^[a-zA-Z0-9-=]+$`)

// externalDiff writes the live and the merged objects into two temporary directories,
// LIVE-* and MERGED-*, one file per object named as kubectl diff names them, and runs
// the program KUBECTL_EXTERNAL_DIFF names on them, as kubectl diff does: the value is
// split at spaces into the program and its arguments, which follow the two directories
// and are kept only when made of letters, digits, - and =. The program writes to the
// plugin's stdout and stderr, and its exit status is diff's (0 same, 1 different,
// above an error); one that cannot run exits 2.
func externalDiff(ctx context.Context, env string, diffs []objectDiff, streams genericiooptions.IOStreams) error {
	fields := strings.Split(env, " ")
	program := fields[0]
	dirs := map[string]string{}
	for _, side := range []string{"LIVE", "MERGED"} {
		dir, err := os.MkdirTemp("", side+"-")
		if err != nil {
			return withCode(diffFailedRun, err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		dirs[side] = dir
	}
	for _, d := range diffs {
		// A name comes from the cluster or the input: no path separator may take the file
		// out of its directory.
		file := strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(d.name)
		if err := os.WriteFile(filepath.Join(dirs["LIVE"], file), []byte(d.live), 0o600); err != nil {
			return withCode(diffFailedRun, err)
		}
		if err := os.WriteFile(filepath.Join(dirs["MERGED"], file), []byte(d.merged), 0o600); err != nil {
			return withCode(diffFailedRun, err)
		}
	}
	args := []string{dirs["LIVE"], dirs["MERGED"]}
	for _, arg := range fields[1:] {
		if externalArg.MatchString(arg) {
			args = append(args, arg)
		}
	}
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Stdout, cmd.Stderr = streams.Out, streams.ErrOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && exit.ExitCode() == diffFound:
		return withCode(diffFound, nil)
	case errors.As(err, &exit) && exit.ExitCode() > diffFound:
		return withCode(exit.ExitCode(), fmt.Errorf("%s exited with status %d", program, exit.ExitCode()))
	default:
		return withCode(diffFailedRun, fmt.Errorf("failed to run %q: %w", program, err))
	}
}
