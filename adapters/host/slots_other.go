//go:build !unix

package host

import (
	"errors"
	"os"
)

// tryLock cannot lock here: every worker counts alone.
func tryLock(*os.File, bool) (bool, error) {
	return false, errors.ErrUnsupported
}
