package storetest_test

import (
	"regexp"
	"testing"

	"github.com/msgx/msgx/store/storetest"
)

// A query file's comment after a statement belongs to the statements after
// it, and may name parameters this one does not take: only the $n outside
// comments count.
func TestCheckPlansCountsParametersOutsideComments(t *testing.T) {
	db := storetest.NewPostgres(t)
	storetest.CheckPlans(t, db.Pool(), map[string]string{
		"One": "SELECT $1::int + 1\n\n-- The statements below name rows by ctid ($2), fenced by the lease ($3).\n",
	}, regexp.MustCompile(`^msgx_`))
}
