package domain_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// The Standard Webhooks / Svix documented example (also the reference
// library's TestWebhookSign).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func mustParseSecret(t testing.TB, s string) domain.Secret {
	t.Helper()
	secret, err := domain.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(%q): %v", s, err)
	}
	return secret
}

// secretOf builds the whsec_ form of an n-byte key filled with b.
func secretOf(b byte, n int) string {
	return "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, n))
}

func TestSignKnownAnswer(t *testing.T) {
	t.Parallel()
	secret := mustParseSecret(t, vectorSecret)
	got := domain.Sign([]domain.Secret{secret}, vectorMsgID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
	if got != vectorSignature {
		t.Fatalf("Sign = %q, want %q", got, vectorSignature)
	}
}

func TestSignSecretList(t *testing.T) {
	t.Parallel()
	current := mustParseSecret(t, secretOf(1, 32))
	previous := mustParseSecret(t, secretOf(2, 24))
	ts := time.Unix(vectorTimestamp, 0)
	body := []byte(vectorBody)
	one := func(s domain.Secret) string { return domain.Sign([]domain.Secret{s}, vectorMsgID, ts, body) }

	tests := []struct {
		name    string
		secrets []domain.Secret
		want    string
	}{
		{"no secrets", nil, ""},
		{"only a zero secret", []domain.Secret{{}}, ""},
		{"one", []domain.Secret{current}, one(current)},
		{"rotation signs with both, current first", []domain.Secret{current, previous}, one(current) + " " + one(previous)},
		{"zero secrets are skipped", []domain.Secret{{}, current, {}, previous}, one(current) + " " + one(previous)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := domain.Sign(tt.secrets, vectorMsgID, ts, body); got != tt.want {
				t.Errorf("Sign = %q, want %q", got, tt.want)
			}
		})
	}
	if s := one(current); !strings.HasPrefix(s, "v1,") || len(s) != 47 {
		t.Errorf("one signature = %q, want v1,<44 base64 chars>", s)
	}
}

// TestSignVerifiesWithReferenceLibrary is SPEC §3's acceptance rule: a
// standard verifier must accept what Dispatch sends, with either secret
// during a rotation.
func TestSignVerifiesWithReferenceLibrary(t *testing.T) {
	t.Parallel()
	current, previous := secretOf(7, 32), secretOf(9, 64)
	secrets := []domain.Secret{mustParseSecret(t, current), mustParseSecret(t, previous)}
	body := []byte(`{"id":"evt_1","type":"order.created","data":{"a":[1,2,3]}}`)
	// The reference library checks the timestamp against the wall clock.
	ts := time.Now()
	header := http.Header{}
	header.Set(standardwebhooks.HeaderWebhookID, "evt_01J0000000000000000000000")
	header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	header.Set(standardwebhooks.HeaderWebhookSignature, domain.Sign(secrets, "evt_01J0000000000000000000000", ts, body))

	for _, secret := range []string{current, previous} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, header); err != nil {
			t.Errorf("reference Verify with %s: %v", secret[:12], err)
		}
		if err := wh.Verify(append(body, ' '), header); err == nil {
			t.Errorf("reference Verify accepted an altered body with %s", secret[:12])
		}
	}
	other, err := standardwebhooks.NewWebhook(secretOf(8, 32))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(body, header); err == nil {
		t.Error("reference Verify accepted a signature made with other secrets")
	}
}

func TestVerifyAcceptsReferenceSignatures(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(vectorTimestamp, 0)
	sig, err := wh.Sign(vectorMsgID, ts, []byte(vectorBody))
	if err != nil {
		t.Fatal(err)
	}
	secrets := []domain.Secret{mustParseSecret(t, vectorSecret)}
	if err := domain.Verify(secrets, vectorMsgID, strconv.Itoa(vectorTimestamp), []byte(vectorBody), sig, ts, 0); err != nil {
		t.Fatalf("Verify(reference signature) = %v", err)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	secret := mustParseSecret(t, vectorSecret)
	otherSecret := mustParseSecret(t, secretOf(3, 32))
	ts := time.Unix(vectorTimestamp, 0)
	tsText := strconv.Itoa(vectorTimestamp)
	otherSig := domain.Sign([]domain.Secret{otherSecret}, vectorMsgID, ts, []byte(vectorBody))

	type input struct {
		secrets   []domain.Secret
		msgID     string
		timestamp string
		body      string
		header    string
		now       time.Time
		tolerance time.Duration
	}
	valid := func(change func(*input)) input {
		in := input{[]domain.Secret{secret}, vectorMsgID, tsText, vectorBody, vectorSignature, ts, 0}
		if change != nil {
			change(&in)
		}
		return in
	}
	tests := []struct {
		name string
		in   input
		want error // nil means accepted
	}{
		{"valid", valid(nil), nil},
		{"second of two entries matches", valid(func(in *input) { in.header = otherSig + " " + vectorSignature }), nil},
		{"second secret matches", valid(func(in *input) { in.secrets = []domain.Secret{otherSecret, secret} }), nil},
		{"unknown versions are skipped", valid(func(in *input) { in.header = "v1a,AAAA v2," + vectorSignature[3:] + " " + vectorSignature }), nil},
		{"repeated spaces are tolerated", valid(func(in *input) { in.header = otherSig + "  " + vectorSignature }), nil},
		{"now exactly tolerance after", valid(func(in *input) { in.now = ts.Add(5 * time.Minute) }), nil},
		{"now exactly tolerance before", valid(func(in *input) { in.now = ts.Add(-5 * time.Minute) }), nil},
		{"custom tolerance", valid(func(in *input) { in.now = ts.Add(time.Hour); in.tolerance = time.Hour }), nil},

		{"missing id", valid(func(in *input) { in.msgID = "" }), domain.ErrMissingSignatureHeaders},
		{"missing timestamp", valid(func(in *input) { in.timestamp = "" }), domain.ErrMissingSignatureHeaders},
		{"missing signature", valid(func(in *input) { in.header = "" }), domain.ErrMissingSignatureHeaders},
		{"timestamp not a number", valid(func(in *input) { in.timestamp = "yesterday" }), domain.ErrInvalidTimestamp},
		{"timestamp with a sign", valid(func(in *input) { in.timestamp = "+" + tsText }), domain.ErrInvalidTimestamp},
		{"timestamp with a leading zero", valid(func(in *input) { in.timestamp = "0" + tsText }), domain.ErrInvalidTimestamp},
		{"timestamp in milliseconds", valid(func(in *input) { in.timestamp = tsText + "000" }), domain.ErrTimestampOutOfTolerance},
		{"timestamp overflowing int64", valid(func(in *input) { in.timestamp = "99999999999999999999" }), domain.ErrInvalidTimestamp},
		{"too old", valid(func(in *input) { in.now = ts.Add(5*time.Minute + time.Second) }), domain.ErrTimestampOutOfTolerance},
		{"too new", valid(func(in *input) { in.now = ts.Add(-5*time.Minute - time.Second) }), domain.ErrTimestampOutOfTolerance},
		{"replayed an hour later", valid(func(in *input) { in.now = ts.Add(time.Hour) }), domain.ErrTimestampOutOfTolerance},
		{"min int64 timestamp", valid(func(in *input) { in.timestamp = "-9223372036854775808" }), domain.ErrTimestampOutOfTolerance},
		{"altered body", valid(func(in *input) { in.body = `{"test": 2432232315}` }), domain.ErrInvalidSignature},
		{"altered id", valid(func(in *input) { in.msgID = "msg_other" }), domain.ErrInvalidSignature},
		{"altered timestamp", valid(func(in *input) { in.timestamp = strconv.Itoa(vectorTimestamp + 1) }), domain.ErrInvalidSignature},
		{"wrong secret", valid(func(in *input) { in.secrets = []domain.Secret{otherSecret} }), domain.ErrInvalidSignature},
		{"no secrets", valid(func(in *input) { in.secrets = nil }), domain.ErrInvalidSignature},
		{"zero secret signs nothing", valid(func(in *input) { in.secrets = []domain.Secret{{}} }), domain.ErrInvalidSignature},
		{"empty v1 entry", valid(func(in *input) { in.header = "v1," }), domain.ErrInvalidSignature},
		{"signature without version", valid(func(in *input) { in.header = vectorSignature[3:] }), domain.ErrInvalidSignature},
		{"truncated signature", valid(func(in *input) { in.header = vectorSignature[:len(vectorSignature)-1] }), domain.ErrInvalidSignature},
		{"signature of the wrong version", valid(func(in *input) { in.header = "v2," + vectorSignature[3:] }), domain.ErrInvalidSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := tt.in
			err := domain.Verify(in.secrets, in.msgID, in.timestamp, []byte(in.body), in.header, in.now, in.tolerance)
			if tt.want == nil && err != nil {
				t.Fatalf("Verify = %v, want nil", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string // "" means valid
	}{
		{vectorSecret, ""},
		{secretOf(0xab, 24), ""},
		{secretOf(0xab, 32), ""},
		{secretOf(0xab, 64), ""},
		{"", "secret must start with whsec_"},
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "secret must start with whsec_"},
		{"WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "secret must start with whsec_"},
		{" whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "secret must start with whsec_"},
		{"whsec_", "secret key must be 24..64 bytes, got 0"},
		{secretOf(1, 8), "secret key must be 24..64 bytes, got 8"},
		{secretOf(1, 23), "secret key must be 24..64 bytes, got 23"},
		{secretOf(1, 65), "secret key must be 24..64 bytes, got 65"},
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw!", "secret key must be standard base64: illegal base64 data at input byte 32"},
		{"whsec_MfKQ9r8GKYqrTwjUPD8I-PZIo2LaLaSw", "secret key must be standard base64: illegal base64 data at input byte 20"},
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwAA", "secret key must be standard base64: illegal base64 data at input byte 32"},
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", "secret key must be standard base64 without line breaks"},
		{"whsec_MfKQ9r8GKYqrTwjU\r\nPD8ILPZIo2LaLaSw", "secret key must be standard base64 without line breaks"},
		// 25 bytes end in "=="; flipping the unused low bits of the last
		// character spells the same key differently, which Strict refuses.
		{secretOf(0xff, 25)[:len(secretOf(0xff, 25))-3] + "x==", "secret key must be standard base64: illegal base64 data at input byte 34"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			s, err := domain.ParseSecret(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseSecret(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				if !s.IsZero() {
					t.Errorf("ParseSecret(%q) returned a non-zero secret with an error", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSecret(%q) = %v", tt.in, err)
			}
			if s.IsZero() || s.Reveal() != tt.in {
				t.Errorf("Reveal() = %q, want %q", s.Reveal(), tt.in)
			}
		})
	}
}

func TestGenerateSecret(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{0x5a}, 40)
	s, err := domain.GenerateSecret(bytes.NewReader(key))
	if err != nil {
		t.Fatal(err)
	}
	if want := "whsec_" + base64.StdEncoding.EncodeToString(key[:32]); s.Reveal() != want {
		t.Errorf("Reveal() = %q, want %q (32 bytes read)", s.Reveal(), want)
	}
	if !mustParseSecret(t, s.Reveal()).Equal(s) {
		t.Error("ParseSecret(Reveal()) is not Equal to the generated secret")
	}

	if _, err := domain.GenerateSecret(bytes.NewReader(key[:31])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("GenerateSecret(short reader) = %v, want io.ErrUnexpectedEOF", err)
	}

	a, b := domain.MustGenerateSecret(), domain.MustGenerateSecret()
	if a.IsZero() || a.Equal(b) {
		t.Error("MustGenerateSecret returned a zero or repeated secret")
	}
	if raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(a.Reveal(), "whsec_")); len(raw) != 32 {
		t.Errorf("generated key is %d bytes, want 32", len(raw))
	}
}

func TestSecretEqual(t *testing.T) {
	t.Parallel()
	a := mustParseSecret(t, secretOf(1, 32))
	tests := []struct {
		name string
		x, y domain.Secret
		want bool
	}{
		{"same key", a, mustParseSecret(t, secretOf(1, 32)), true},
		{"other key", a, mustParseSecret(t, secretOf(2, 32)), false},
		{"prefix of the key", mustParseSecret(t, secretOf(1, 24)), a, false},
		{"zero and set", domain.Secret{}, a, false},
		{"both zero", domain.Secret{}, domain.Secret{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.x.Equal(tt.y); got != tt.want {
				t.Errorf("Equal = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSecretNeverPrinted checks every way a secret commonly reaches a log:
// fmt verbs on the secret and on a subscription holding it, and slog.
func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	s := mustParseSecret(t, vectorSecret)
	if got := s.String(); got != "whsec_***" {
		t.Errorf("String() = %q, want whsec_***", got)
	}
	if got := (domain.Secret{}).String(); got != "" {
		t.Errorf("zero String() = %q, want empty", got)
	}
	if got := (domain.Secret{}).Reveal(); got != "" {
		t.Errorf("zero Reveal() = %q, want empty", got)
	}
	sub := domain.Subscription{ID: "sub_1", Secret: s, PreviousSecret: s}

	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", s, "sub", sub)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "secret", s, "sub", sub, slog.Any("any", s))

	printed := []string{logs.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%o", "%b", "%T %v"} {
		printed = append(printed, fmt.Sprintf(verb, s), fmt.Sprintf(verb, sub), fmt.Sprintf(verb, &sub))
	}
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(vectorSecret, "whsec_"))
	leaks := []string{
		strings.TrimPrefix(vectorSecret, "whsec_"),
		fmt.Sprintf("%x", raw), fmt.Sprintf("%X", raw), fmt.Sprintf("%v", raw), fmt.Sprintf("%d", raw[:4]),
		strings.Trim(fmt.Sprintf("%v", raw[:4]), "[]"), string(raw[:6]),
	}
	for _, out := range printed {
		for _, leak := range leaks {
			if strings.Contains(out, leak) {
				t.Errorf("output leaks the key (%q):\n%s", leak, out)
			}
		}
	}
	if !strings.Contains(logs.String(), "whsec_***") {
		t.Errorf("logs do not show the redacted secret:\n%s", logs.String())
	}
}

// FuzzParseSecret: no input panics, and whatever parses prints back as
// itself, so a stored secret is exactly the one the subscriber holds.
func FuzzParseSecret(f *testing.F) {
	for _, seed := range []string{
		vectorSecret, secretOf(0, 24), secretOf(0xff, 64), "whsec_", "whsec_=", "whsec_\n", "", "whsec_AAAA====",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS=", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\r",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := domain.ParseSecret(in)
		if err != nil {
			if !s.IsZero() {
				t.Fatalf("ParseSecret(%q) returned a secret and error %v", in, err)
			}
			return
		}
		if s.Reveal() != in {
			t.Fatalf("ParseSecret(%q).Reveal() = %q", in, s.Reveal())
		}
		if s.String() != "whsec_***" {
			t.Fatalf("String() = %q", s.String())
		}
	})
}

// FuzzSignVerify: Verify accepts what Sign produced, the reference library
// computes the same signature, and an altered body is refused.
func FuzzSignVerify(f *testing.F) {
	f.Add([]byte("0123456789abcdef01234567"), vectorMsgID, int64(vectorTimestamp), []byte(vectorBody))
	f.Add(bytes.Repeat([]byte{0xff}, 64), "", int64(0), []byte{})
	f.Add([]byte{1}, "evt_ä.ö", int64(-62135596800), []byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, key []byte, msgID string, unix int64, body []byte) {
		// Bring the key into the accepted 24..64 bytes.
		key = append(key, make([]byte, 24)...)[:min(len(key)+24, 64)]
		encoded := "whsec_" + base64.StdEncoding.EncodeToString(key)
		secret := mustParseSecret(t, encoded)
		ts := time.Unix(unix, 0)
		header := domain.Sign([]domain.Secret{secret}, msgID, ts, body)

		wh, err := standardwebhooks.NewWebhook(encoded)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := wh.Sign(msgID, ts, body); header != want {
			t.Fatalf("Sign = %q, reference library = %q", header, want)
		}
		if msgID == "" {
			return // Verify requires an id, as every verifier does
		}
		tsText := strconv.FormatInt(unix, 10)
		secrets := []domain.Secret{secret}
		if err := domain.Verify(secrets, msgID, tsText, body, header, ts, 0); err != nil {
			t.Fatalf("Verify(Sign) = %v", err)
		}
		altered := append(bytes.Clone(body), '!')
		if err := domain.Verify(secrets, msgID, tsText, altered, header, ts, 0); !errors.Is(err, domain.ErrInvalidSignature) {
			t.Fatalf("Verify(altered body) = %v, want ErrInvalidSignature", err)
		}
	})
}

func BenchmarkSign(b *testing.B) {
	secrets := []domain.Secret{mustParseSecret(b, secretOf(1, 32)), mustParseSecret(b, secretOf(2, 32))}
	ts := time.Unix(vectorTimestamp, 0)
	for _, size := range []int{1 << 10, 256 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		for _, n := range []int{1, 2} {
			b.Run(fmt.Sprintf("body=%dKiB/secrets=%d", size>>10, n), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					domain.Sign(secrets[:n], "evt_01J0000000000000000000000", ts, body)
				}
			})
		}
	}
}
