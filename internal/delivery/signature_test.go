package delivery_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

// The Standard Webhooks test vector, from the official Go library's test
// TestWebhookSign (standard-webhooks/standard-webhooks,
// libraries/go/webhook_test.go); the other official libraries use the same one.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// secretOf returns a parsed secret whose key is n copies of b.
func secretOf(t testing.TB, b byte, n int) delivery.Secret {
	t.Helper()
	s, err := delivery.ParseSecret(delivery.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, n)))
	require.NoError(t, err)
	return s
}

func mustParseSecret(t testing.TB, s string) delivery.Secret {
	t.Helper()
	secret, err := delivery.ParseSecret(s)
	require.NoError(t, err)
	return secret
}

func TestSignStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	s := mustParseSecret(t, vectorSecret)
	ts := time.Unix(vectorTimestamp, 0)

	got := delivery.Sign(vectorMsgID, ts, []byte(vectorPayload), s)

	require.Equal(t, vectorSignature, got)
	require.NoError(t, delivery.Verify(vectorSignature, vectorMsgID, ts, []byte(vectorPayload), s, ts, 5*time.Minute))
	// Sub-second precision is not part of the signed content.
	require.Equal(t, vectorSignature, delivery.Sign(vectorMsgID, ts.Add(999*time.Millisecond), []byte(vectorPayload), s))
}

func TestSignTwoSecrets(t *testing.T) {
	t.Parallel()
	current, previous, other := secretOf(t, 1, 32), secretOf(t, 2, 24), secretOf(t, 3, 64)
	ts := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"invoice.paid"}`)

	header := delivery.Sign("msg_1", ts, body, current, previous)

	sigs := strings.Split(header, " ")
	require.Len(t, sigs, 2)
	require.Equal(t, delivery.Sign("msg_1", ts, body, current), sigs[0], "signatures are in the order given")
	require.Equal(t, delivery.Sign("msg_1", ts, body, previous), sigs[1])
	for _, s := range []delivery.Secret{current, previous} {
		require.NoError(t, delivery.Verify(header, "msg_1", ts, body, s, ts, time.Minute))
	}
	require.ErrorIs(t, delivery.Verify(header, "msg_1", ts, body, other, ts, time.Minute), delivery.ErrSignatureMismatch)
	require.Empty(t, delivery.Sign("msg_1", ts, body), "no secrets, no signature")
}

func TestVerifyRejectsTampering(t *testing.T) {
	t.Parallel()
	s := mustParseSecret(t, vectorSecret)
	ts := time.Unix(vectorTimestamp, 0)
	body := []byte(vectorPayload)

	tests := []struct {
		name   string
		header string
		msgID  string
		ts     time.Time
		body   []byte
	}{
		{"body", vectorSignature, vectorMsgID, ts, []byte(`{"test": 2432232315}`)},
		{"body whitespace", vectorSignature, vectorMsgID, ts, []byte(`{"test":2432232314}`)},
		{"empty body", vectorSignature, vectorMsgID, ts, nil},
		{"msg id", vectorSignature, "msg_p5jXN8AQM9LWM0D4loKWxJel", ts, body},
		{"timestamp", vectorSignature, vectorMsgID, ts.Add(time.Second), body},
		{"signature", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", vectorMsgID, ts, body},
		{"wrong version", "v1a" + vectorSignature[2:], vectorMsgID, ts, body},
		{"no version", vectorSignature[3:], vectorMsgID, ts, body},
		{"empty v1", "v1,", vectorMsgID, ts, body},
		{"empty header", "", vectorMsgID, ts, body},
		{"truncated", vectorSignature[:len(vectorSignature)-1], vectorMsgID, ts, body},
		{"glued to another", vectorSignature + "v1,", vectorMsgID, ts, body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := delivery.Verify(tt.header, tt.msgID, tt.ts, tt.body, s, tt.ts, 5*time.Minute)
			require.ErrorIs(t, err, delivery.ErrSignatureMismatch)
			require.NotErrorIs(t, err, delivery.ErrTimestampOutOfTolerance)
		})
	}
}

func TestVerifyHeaderForms(t *testing.T) {
	t.Parallel()
	s := mustParseSecret(t, vectorSecret)
	ts := time.Unix(vectorTimestamp, 0)
	bogus := "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="

	tests := []struct {
		name   string
		header string
	}{
		{"alone", vectorSignature},
		{"last of several", bogus + " v2,abc " + vectorSignature},
		{"first of several", vectorSignature + " " + bogus},
		{"between asymmetric ones", "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw== " + vectorSignature + " v1a,xyz"},
		{"extra spaces", "  " + bogus + "   " + vectorSignature + " "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, delivery.Verify(tt.header, vectorMsgID, ts, []byte(vectorPayload), s, ts, time.Minute))
		})
	}
}

func TestVerifyTolerance(t *testing.T) {
	t.Parallel()
	s := mustParseSecret(t, vectorSecret)
	ts := time.Unix(vectorTimestamp, 0)
	header := delivery.Sign(vectorMsgID, ts, []byte(vectorPayload), s)
	const tolerance = 5 * time.Minute

	tests := []struct {
		name    string
		now     time.Time
		wantErr error
	}{
		{"same second", ts, nil},
		{"receiver ahead by the tolerance", ts.Add(tolerance), nil},
		{"receiver behind by the tolerance", ts.Add(-tolerance), nil},
		{"too old", ts.Add(tolerance + time.Second), delivery.ErrTimestampOutOfTolerance},
		{"too new", ts.Add(-tolerance - time.Second), delivery.ErrTimestampOutOfTolerance},
		{"replayed a day later", ts.Add(24 * time.Hour), delivery.ErrTimestampOutOfTolerance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := delivery.Verify(header, vectorMsgID, ts, []byte(vectorPayload), s, tt.now, tolerance)
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.NotErrorIs(t, err, delivery.ErrSignatureMismatch)
		})
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xA5}, n)) }

	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"spec vector (24 bytes)", vectorSecret, ""},
		{"32 bytes", "whsec_" + b64(32), ""},
		{"64 bytes", "whsec_" + b64(64), ""},
		{"missing prefix", strings.TrimPrefix(vectorSecret, "whsec_"), `missing "whsec_" prefix`},
		{"other prefix", "whsk_" + b64(32), `missing "whsec_" prefix`},
		{"uppercase prefix", "WHSEC_" + b64(32), `missing "whsec_" prefix`},
		{"empty", "", `missing "whsec_" prefix`},
		{"prefix only", "whsec_", "key is 0 bytes, want 24 to 64"},
		{"not base64", "whsec_!!!!" + b64(30), "not valid standard base64"},
		{"url alphabet", "whsec_" + strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xFB}, 30))), "not valid standard base64"},
		{"missing padding", "whsec_" + base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 31)), "not valid standard base64"},
		{"embedded newline", "whsec_" + b64(30)[:8] + "\n" + b64(30)[8:], "not canonical standard base64"},
		{"non-zero padding bits", "whsec_" + strings.TrimSuffix(b64(32), "U=") + "V=", "not valid standard base64"},
		{"23 bytes", "whsec_" + b64(23), "key is 23 bytes, want 24 to 64"},
		{"65 bytes", "whsec_" + b64(65), "key is 65 bytes, want 24 to 64"},
		{"trailing space", vectorSecret + " ", "not valid standard base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := delivery.ParseSecret(tt.in)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.in, s.Reveal())
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.True(t, strings.HasPrefix(err.Error(), "parse secret: "), err.Error())
			if encoded := strings.TrimPrefix(tt.in, "whsec_"); len(encoded) > 8 {
				require.NotContains(t, err.Error(), encoded, "errors never echo the secret")
			}
		})
	}
}

func TestSecretIsRedacted(t *testing.T) {
	t.Parallel()
	s := mustParseSecret(t, vectorSecret)
	key := strings.TrimPrefix(vectorSecret, "whsec_")
	holder := struct{ Secret delivery.Secret }{s}

	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		for _, arg := range []any{s, holder, &holder, []delivery.Secret{s}} {
			out := fmt.Sprintf(format, arg)
			require.NotContains(t, out, key, "format %s of %T", format, arg)
		}
	}
	require.Equal(t, "whsec_****", s.String())
	require.Equal(t, vectorSecret, s.Reveal())
}

func TestGenerateSecret(t *testing.T) {
	t.Parallel()
	random := bytes.NewReader(bytes.Repeat([]byte{7}, 64))

	got, err := delivery.GenerateSecret(random)
	require.NoError(t, err)
	require.Equal(t, "whsec_"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)), got)
	s, err := delivery.ParseSecret(got)
	require.NoError(t, err)
	require.Equal(t, got, s.Reveal())
	require.Equal(t, 32, random.Len(), "exactly 32 bytes are read")

	_, err = delivery.GenerateSecret(bytes.NewReader(make([]byte, 31)))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = delivery.GenerateSecret(iotest.ErrReader(io.ErrClosedPipe))
	require.ErrorIs(t, err, io.ErrClosedPipe)
	require.ErrorContains(t, err, "generate secret: read random bytes")
}

func FuzzSignVerify(f *testing.F) {
	f.Add(vectorMsgID, int64(vectorTimestamp), []byte(vectorPayload), []byte("0123456789abcdefghijklmn"), uint16(0))
	f.Add("", int64(0), []byte{}, []byte{}, uint16(3))
	f.Add("msg.with.dots", int64(-1), []byte{0xff, 0x00, '.'}, bytes.Repeat([]byte{0xff}, 80), uint16(65535))

	f.Fuzz(func(t *testing.T, msgID string, unix int64, body, key []byte, flip uint16) {
		// Keys are fitted into the accepted 24..64 byte range.
		if len(key) > delivery.MaxSecretBytes {
			key = key[:delivery.MaxSecretBytes]
		}
		for len(key) < delivery.MinSecretBytes {
			key = append(key, 0)
		}
		s, err := delivery.ParseSecret(delivery.SecretPrefix + base64.StdEncoding.EncodeToString(key))
		require.NoError(t, err)
		ts := time.Unix(unix%(1<<40), 0)

		header := delivery.Sign(msgID, ts, body, s)
		require.NoError(t, delivery.Verify(header, msgID, ts, body, s, ts, time.Second))

		if len(body) == 0 {
			return
		}
		tampered := bytes.Clone(body)
		tampered[int(flip)%len(tampered)] ^= 1 << (flip % 8)
		require.ErrorIs(t, delivery.Verify(header, msgID, ts, tampered, s, ts, time.Second), delivery.ErrSignatureMismatch)
	})
}

func FuzzParseSecret(f *testing.F) {
	f.Add(vectorSecret)
	f.Add("whsec_")
	f.Add("whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 64)))
	f.Add("whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)))
	f.Add("whsec_====")
	f.Add("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")

	f.Fuzz(func(t *testing.T, in string) {
		s, err := delivery.ParseSecret(in)
		encoded, _ := strings.CutPrefix(in, delivery.SecretPrefix)
		if err != nil {
			if len(encoded) >= 16 && !strings.ContainsAny(encoded, " :\"") {
				require.NotContains(t, err.Error(), encoded, "errors never echo the secret")
			}
			return
		}
		require.Equal(t, in, s.Reveal(), "accepted secrets round-trip")
		require.Equal(t, "whsec_****", s.String())
		require.NotContains(t, fmt.Sprintf("%v %+v %#v", s, s, s), encoded)
	})
}
