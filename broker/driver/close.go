package driver

import (
	"context"
	"errors"
)

// CloseAll closes every subscription and joins their errors. Drivers call it
// from Close with the subscriptions they copied under their lock, so that no
// lock is held while a subscription waits for its broker.
func CloseAll[S interface{ Close(context.Context) error }](ctx context.Context, subs []S) error {
	var errs []error
	for _, s := range subs {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
