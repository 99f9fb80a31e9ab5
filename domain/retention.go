package domain

import (
	"fmt"
	"time"
)

// MinRetention is the shortest history retention (DISPATCH_RETENTION).
const MinRetention = time.Minute

// DefaultRetention is the history retention when none is configured.
const DefaultRetention = 720 * time.Hour

// ValidateRetention reports whether retention may be configured.
func ValidateRetention(retention time.Duration) error {
	if retention < MinRetention {
		return fmt.Errorf("retention %s is shorter than the minimum %s", retention, MinRetention)
	}
	return nil
}

// RetentionWindow is the size of the time windows history is kept in for
// a retention: a quarter of it, rounded to a whole second, so a retention
// period spans a handful of windows (1m: 15s windows; 720h: 180h). History
// is dropped a window at a time, so it is kept up to a window longer than
// the retention.
func RetentionWindow(retention time.Duration) time.Duration {
	return max((retention / 4).Round(time.Second), time.Second)
}
