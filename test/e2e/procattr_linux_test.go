//go:build e2e

package e2e

import "syscall"

// childProcAttr makes a manager die with the test binary, even when the binary itself is
// killed and its teardown never runs.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
