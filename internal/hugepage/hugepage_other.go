//go:build !linux

package hugepage

import "errors"

func reserve(int) (int, error) { return 0, errors.ErrUnsupported }
