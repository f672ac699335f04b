package destination

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A dial that ends after its caller's deadline with a sticky error (a
// broker that delays refusing credentials) is answered to the next
// caller at once; another error is dialed again.
func TestLazyConnKeepsAStickyRefusal(t *testing.T) {
	t.Parallel()
	errAuth, errOther := errors.New("refused credentials"), errors.New("other")
	for _, tc := range []struct {
		err    error
		redial bool
	}{{errAuth, false}, {errOther, true}} {
		release := make(chan struct{})
		dials := make(chan struct{}, 8)
		c := newLazyConn(time.Minute, func(context.Context) (int, error) {
			dials <- struct{}{}
			<-release
			return 0, tc.err
		}, func(int) {})
		c.sticky = func(err error) bool { return errors.Is(err, errAuth) }
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the first caller's deadline is past before the refusal
		_, err := c.get(ctx)
		require.ErrorIs(t, err, context.Canceled)
		<-dials
		close(release)
		// The second caller joins the dial or comes after it: either way
		// it sees its error. The third comes after it.
		for range 2 {
			_, err = c.get(context.Background())
			require.ErrorIs(t, err, tc.err)
		}
		if tc.redial {
			require.NotEmpty(t, dials, "dialed again")
		} else {
			require.Empty(t, dials, "not dialed again")
		}
		c.Close()
	}
}
