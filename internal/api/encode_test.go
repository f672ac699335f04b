package api

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeNamesAreCaseSensitive: encoding/json matches member names
// case-insensitively; decode must not, or "TENANT_ID" would be taken as
// tenant_id, and a second spelling could override the first.
func TestDecodeNamesAreCaseSensitive(t *testing.T) {
	t.Parallel()
	const ep = `"tenant_id":"acme","url":"https://acme.example/hook"`
	for _, tc := range []struct {
		name   string
		decode func(body string) error
		body   string
		want   map[string]string // field -> message
	}{
		{
			name:   "upper case",
			decode: decodeAs[createEndpointRequest],
			body:   `{"TENANT_ID":"acme","url":"https://acme.example/hook"}`,
			want:   map[string]string{"TENANT_ID": `is not a known field; names are case-sensitive (did you mean "tenant_id"?)`},
		},
		{
			name:   "a second spelling after the exact one",
			decode: decodeAs[createEndpointRequest],
			body:   `{` + ep + `,"Tenant_Id":"globex"}`,
			want:   map[string]string{"Tenant_Id": `is not a known field; names are case-sensitive (did you mean "tenant_id"?)`},
		},
		{
			name:   "every one is named, with plain unknown fields",
			decode: decodeAs[createEndpointRequest],
			body:   `{` + ep + `,"Description":"x","colour":"red","Event_Types":[]}`,
			want: map[string]string{
				"Description": `is not a known field; names are case-sensitive (did you mean "description"?)`,
				"Event_Types": `is not a known field; names are case-sensitive (did you mean "event_types"?)`,
				"colour":      "is not a known field",
			},
		},
		{
			name:   "patch",
			decode: decodeAs[updateEndpointRequest],
			body:   `{"URL":"https://evil.example/hook"}`,
			want:   map[string]string{"URL": `is not a known field; names are case-sensitive (did you mean "url"?)`},
		},
		{
			name:   "message",
			decode: decodeAs[createMessageRequest],
			body:   `{"tenant_id":"acme","event_type":"a","Payload":1}`,
			want:   map[string]string{"Payload": `is not a known field; names are case-sensitive (did you mean "payload"?)`},
		},
		{
			name:   "breaker operation",
			decode: decodeAs[operateBreakerRequest],
			body:   `{"Reason":"x"}`,
			want:   map[string]string{"Reason": `is not a known field; names are case-sensitive (did you mean "reason"?)`},
		},
		{
			name:   "keys inside metadata are data, not names",
			decode: decodeAs[createEndpointRequest],
			body:   `{` + ep + `,"metadata":{"Team":"a","TEAM":"b"}}`,
		},
		{
			name:   "keys inside a payload are data, not names",
			decode: decodeAs[createMessageRequest],
			body:   `{"tenant_id":"acme","event_type":"a","payload":{"TENANT_ID":"x","Payload":1}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.decode(tc.body)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			got := map[string]string{}
			for _, f := range ve.Fields {
				got[f.Field] = f.Message
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func decodeAs[T validator](body string) error {
	_, err := decode[T](request("application/json", []byte(body)), maxRequestBytes)
	return err
}
