//go:build e2e && !linux

package e2e

import "syscall"

// childProcAttr has nothing to add where the parent-death signal does not exist.
func childProcAttr() *syscall.SysProcAttr {
	return nil
}
