package httpingress_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/unicode"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/httpingress"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// A FLOP whose remark is Chinese, as AODB installations send it.
const chineseDoc = `<?xml version="1.0" encoding="%s"?><MSG><META><SNDR>AODB</SNDR><SEQN>9</SEQN><TYPE>FLOP</TYPE><STYP>ETA</STYP></META><FLOP><FLID>1</FLID><RMRK>航班延误，旅客请到三号登机口</RMRK></FLOP></MSG>`

func doc(encoding string) string { return strings.Replace(chineseDoc, "%s", encoding, 1) }

func TestGBKBodyIsStoredAsUTF8AndKeptByteExactOnMariaDB(t *testing.T) {
	ctx := context.Background()
	table, raw := mariaDBMailbox(t)
	db := storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))
	eng, err := inbox.New(db, "sis", identityProc{}, inbox.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	httpingress.New(table, httpingress.WithLogger(testkit.Quiet()), httpingress.WithEnqueuer(eng)).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	gbk, err := simplifiedchinese.GBK.NewEncoder().String(doc("GBK"))
	if err != nil {
		t.Fatal(err)
	}
	// A legacy client: no charset in the Content-Type, the declaration says GBK.
	resp, err := http.Post(srv.URL+httpingress.Path, "text/xml", strings.NewReader(gbk))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST of a GBK body = %d", resp.StatusCode)
	}
	// The mailbox holds the text in UTF-8, its declaration saying so.
	want := doc("UTF-8")
	var stored []byte
	if err := raw.QueryRowContext(ctx, "SELECT CMINMSGS_CLOB_MSG FROM "+table.Name()+" WHERE CMINMSGS_ID = 1").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if string(stored) != want {
		t.Fatalf("mailbox holds %q, want %q", stored, want)
	}
	// The inbox processes that text and keeps the received bytes exactly.
	var payload []byte
	if err := db.QueryRow(ctx, "SELECT payload FROM msgx_inbox WHERE stream = 'sis' AND msg_id = 1").Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if string(payload) != want {
		t.Fatalf("inbox payload %q", payload)
	}
	charset, original, err := inbox.Original(ctx, db, "sis", 1)
	if err != nil || charset != "gbk" || string(original) != gbk {
		t.Fatalf("original = %q %x, %v; want gbk %x", charset, original, err, gbk)
	}
}

func TestBodiesInOtherCharsetsAreTranscoded(t *testing.T) {
	gb18030, _ := simplifiedchinese.GB18030.NewEncoder().String(doc("GB18030") + "𠀀") // a character beyond GBK
	gbk, _ := simplifiedchinese.GBK.NewEncoder().String(doc("GB2312"))
	utf16, _ := unicode.UTF16(unicode.LittleEndian, unicode.UseBOM).NewEncoder().String(doc("UTF-16"))
	utf16be, _ := unicode.UTF16(unicode.BigEndian, unicode.UseBOM).NewEncoder().String(doc("UTF-16"))
	s := newSetup(t, engine)
	for i, tc := range []struct {
		name, ct, body, want, charset string
	}{
		{"GB18030 declared", "application/xml", gb18030, doc("UTF-8") + "𠀀", "gb18030"},
		{"GB2312 in the Content-Type", "text/xml; charset=GB2312", gbk, doc("UTF-8"), "gbk"},
		{"UTF-16LE with a BOM", "text/xml", utf16, doc("UTF-8"), "utf-16le"},
		{"UTF-16BE with a BOM, labelled UTF-16", "text/xml; charset=UTF-16", utf16be, doc("UTF-8"), "utf-16be"},
		{"UTF-8", "text/xml", doc("UTF-8"), doc("UTF-8"), ""},
	} {
		id := int64(i + 1)
		if code, out, _ := s.post(t, tc.ct, strings.NewReader(tc.body)); code != http.StatusOK {
			t.Fatalf("%s: %d %q", tc.name, code, out)
		}
		r, err := inbox.Get(context.Background(), s.db, "sis", id)
		if err != nil {
			t.Fatal(err)
		}
		var payload []byte
		if err := s.db.QueryRow(context.Background(), "SELECT payload FROM msgx_inbox WHERE stream = 'sis' AND msg_id = ?1", r.ID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		if string(payload) != tc.want {
			t.Errorf("%s: payload %q", tc.name, payload)
		}
		charset, original, err := inbox.Original(context.Background(), s.db, "sis", id)
		if tc.charset == "" {
			if err != inbox.ErrNotFound {
				t.Errorf("%s: an original kept for a UTF-8 body (%v)", tc.name, err)
			}
			continue
		}
		if err != nil || charset != tc.charset || string(original) != tc.body {
			t.Errorf("%s: original %q (%v), want %s byte-exact", tc.name, charset, err, tc.charset)
		}
	}
}

// slowMailbox holds every insert until it is released.
type slowMailbox struct {
	inside  chan struct{}
	release chan struct{}
}

func (m *slowMailbox) Insert(ctx context.Context, _ []byte, _ time.Time, _ mailbox.Meta) (int64, error) {
	m.inside <- struct{}{}
	select {
	case <-m.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return 1, nil
}

func TestAFloodGets503(t *testing.T) {
	mb := &slowMailbox{inside: make(chan struct{}, 8), release: make(chan struct{})}
	h := httpingress.New(mb, httpingress.WithLogger(testkit.Quiet()), httpingress.WithMaxConcurrent(2))
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func() int {
		resp, err := http.Post(srv.URL+httpingress.Path, "text/xml", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() { codes[i] = post() })
	}
	<-mb.inside
	<-mb.inside // both slots are taken
	if code := post(); code != http.StatusServiceUnavailable {
		t.Fatalf("a request beyond the limit = %d, want 503", code)
	}
	close(mb.release)
	wg.Wait()
	if codes[0] != http.StatusOK || codes[1] != http.StatusOK {
		t.Fatalf("the admitted requests = %v", codes)
	}
	if code := post(); code != http.StatusOK {
		t.Fatalf("after the flood = %d", code)
	}
}

// A UTF-8 body whose declaration still says GBK (a message that went through
// a text column) is read by the ingress as the mailbox reads it: as the
// UTF-8 it is, not refused as "not GBK text".
func TestUTF8BodyDeclaringGBKIsReadAsUTF8(t *testing.T) {
	s := newSetup(t, engine)
	if code, out, _ := s.post(t, "text/xml", strings.NewReader(doc("GBK"))); code != http.StatusOK {
		t.Fatalf("POST of UTF-8 declaring GBK, no charset = %d %q", code, out)
	}
	var payload []byte
	if err := s.db.QueryRow(context.Background(), "SELECT payload FROM msgx_inbox WHERE stream = 'sis' AND msg_id = 1").Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if string(payload) != doc("UTF-8") {
		t.Fatalf("payload %q, want %q", payload, doc("UTF-8"))
	}
	if _, _, err := inbox.Original(context.Background(), s.db, "sis", 1); err != inbox.ErrNotFound {
		t.Errorf("an original kept for a body that was UTF-8 already (%v)", err)
	}
}

// serve runs the ingress on table, enqueueing nowhere.
func serve(t *testing.T, table httpingress.Mailbox) string {
	t.Helper()
	mux := http.NewServeMux()
	httpingress.New(table, httpingress.WithLogger(testkit.Quiet())).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + httpingress.Path
}

// A GBK body within the ingress's limit that grows past what the MariaDB
// mailbox holds once transcoded to UTF-8 (3 bytes a character instead of 2)
// is answered 413 with the reason — not 503, which a legacy sender would
// retry for ever — and nothing is stored.
func TestBodyThatGrowsPastTheMailboxLimitIs413OnMariaDB(t *testing.T) {
	table, raw := mariaDBMailbox(t)
	limit, err := table.MaxMessage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var packet int64
	if err := raw.QueryRow("SELECT @@max_allowed_packet").Scan(&packet); err != nil {
		t.Fatal(err)
	}
	if limit <= 0 || limit >= packet || limit > 16<<20-1 {
		t.Fatalf("limit %d: want below max_allowed_packet %d and MEDIUMTEXT", limit, packet)
	}
	// Characters: 2n bytes of GBK, 3n of UTF-8, more than the server takes
	// in one packet and than the column holds.
	n := int(packet/3) + 1
	gbk, err := simplifiedchinese.GBK.NewEncoder().String(doc("GBK") + strings.Repeat("延", n))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(gbk)) > httpingress.DefaultMaxBytes {
		t.Fatalf("the body (%d bytes) is over the ingress's own limit", len(gbk))
	}
	resp, err := http.Post(serve(t, table), "text/xml", strings.NewReader(gbk))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "holds at most") {
		t.Fatalf("POST = %d %q, want 413 with the reason", resp.StatusCode, b)
	}
	var rows int
	if err := raw.QueryRow("SELECT COUNT(*) FROM " + table.Name()).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("mailbox rows %d (%v)", rows, err)
	}
}

// A body with a NUL byte cannot be stored in a mailbox on PostgreSQL (a
// text column): 400 with the reason, not 503.
func TestNULByteIs400OnAPostgresMailbox(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))
	table, err := mailbox.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(serve(t, table), "text/xml", strings.NewReader("<MSG>a\x00b</MSG>"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "NUL") {
		t.Fatalf("POST = %d %q, want 400 naming the NUL byte", resp.StatusCode, b)
	}
}

// sisDoc is a SIS message whose header fills every subsystem column.
const sisDoc = `<?xml version="1.0" encoding="UTF-8"?><MSG><META><SNDR>AODB</SNDR><SEQN>1243</SEQN><DTTM>20120229090511</DTTM>` +
	`<TYPE>FLOP</TYPE><STYP>ETA</STYP></META><FLOP><FLID>1</FLID></FLOP></MSG>`

// A row the ingress writes has the subsystem and sent-date columns a legacy
// sender's rows have: SNDR, SEQN, DTTM (airport time), TYPE and STYP.
func TestIngressFillsTheSubsystemColumnsOnMariaDB(t *testing.T) {
	table, raw := mariaDBMailbox(t)
	resp, err := http.Post(serve(t, table), "text/xml", strings.NewReader(sisDoc))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST = %d", resp.StatusCode)
	}
	var name, typ, styp, sent string
	var seq int64
	err = raw.QueryRow("SELECT CMINMSGS_SUBSYSTEM_NAME, CMINMSGS_SUBSYSTEM_SEQUENCE, CAST(CMINMSGS_SUBSYSTEM_DATE_SENT AS CHAR), "+
		"CMINMSGS_SUBSYSTEM_TYPE, CMINMSGS_SUBSYSTEM_SUBTYPE FROM "+table.Name()).Scan(&name, &seq, &sent, &typ, &styp)
	if err != nil {
		t.Fatalf("the subsystem columns: %v", err)
	}
	if name != "AODB" || seq != 1243 || !strings.HasPrefix(sent, "2012-02-29 09:05:11") || typ != "FLOP" || styp != "ETA" {
		t.Fatalf("columns %q %d %q %q %q", name, seq, sent, typ, styp)
	}
	// A value larger than its column is left NULL; the message is stored.
	big := strings.Replace(strings.Replace(sisDoc, "<SEQN>1243", "<SEQN>900000000", 1), "<SNDR>AODB", "<SNDR>AODB-2", 1)
	resp, err = http.Post(serve(t, table), "text/xml", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST with values larger than their columns = %d", resp.StatusCode)
	}
	var nullName, nullSeq bool
	if err := raw.QueryRow("SELECT CMINMSGS_SUBSYSTEM_NAME IS NULL, CMINMSGS_SUBSYSTEM_SEQUENCE IS NULL FROM "+table.Name()+
		" WHERE CMINMSGS_ID = 2").Scan(&nullName, &nullSeq); err != nil || !nullName || !nullSeq {
		t.Fatalf("oversized values: NULL name %v, NULL sequence %v (%v)", nullName, nullSeq, err)
	}
}
