package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// encode writes v as JSON with status. HTML escaping is off: it would
// rewrite a message payload's <, > and & inside the raw JSON, so GET would
// not show the bytes that were accepted and are signed.
func encode(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// validator is a request body that can check itself.
type validator interface {
	validate() error
}

// decode reads one JSON object of type T from r (at most limit bytes),
// rejecting unknown fields (names are case-sensitive), trailing data and
// wrong content types, then validates it. Every failure names the field at
// fault.
func decode[T validator](r *http.Request, limit int64) (T, error) {
	var v T
	if err := checkJSONContentType(r); err != nil {
		return v, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		return v, decodeError(err, limit)
	}
	return decodeBytes[T](body, limit)
}

// decodeBytes is decode's reading of one JSON object of type T from body,
// with the same rules; fields are named as in body.
func decodeBytes[T validator](body []byte, limit int64) (T, error) {
	var v T
	if err := checkExactNames(reflect.TypeFor[T](), body); err != nil {
		return v, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, decodeError(err, limit)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return v, invalid("body", "must hold exactly one JSON object")
	}
	return v, v.validate()
}

// checkExactNames rejects every member of the JSON object body whose name is
// not exactly the JSON name of a field of the struct type t. encoding/json
// matches names case-insensitively, so without this "TENANT_ID" would be
// taken as tenant_id (and, repeated, could override it). A body that is not
// one JSON object passes: the typed decode says what is wrong with it. The
// request types' nested objects are maps or raw JSON, whose keys are data.
func checkExactNames(t reflect.Type, body []byte) error {
	var members map[string]json.RawMessage
	if t.Kind() != reflect.Struct || json.Unmarshal(body, &members) != nil {
		return nil
	}
	known := jsonNames(t)
	var fe fieldErrors
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if slices.Contains(known, name) {
			continue
		}
		if name == "" {
			fe.add("body", `has a field named "", which is not a known field`)
			continue
		}
		message := "is not a known field"
		if i := slices.IndexFunc(known, func(k string) bool { return strings.EqualFold(k, name) }); i >= 0 {
			message = fmt.Sprintf("is not a known field; names are case-sensitive (did you mean %q?)", known[i])
		}
		fe.add(name, message)
	}
	return fe.err()
}

// jsonNames returns the JSON member names encoding/json gives the exported
// fields of the struct type t, in field order. The request types embed no
// structs (the fields of one would be refused, loudly, not accepted by
// mistake).
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case f.Anonymous && f.Type.Kind() == reflect.Struct && tag == "":
			// encoding/json reads an embedded struct's fields as the
			// outer struct's.
			names = append(names, jsonNames(f.Type)...)
		case !f.IsExported() || tag == "-":
		case name == "":
			names = append(names, f.Name)
		default:
			names = append(names, name)
		}
	}
	return names
}

// checkJSONContentType accepts a missing content type or a JSON one.
func checkJSONContentType(r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errUnsupportedMedia
		}
	}
	return nil
}

// decodeError turns an encoding/json error into a field error.
func decodeError(err error, limit int64) error {
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		mbe       *http.MaxBytesError
	)
	switch {
	case errors.As(err, &mbe):
		return &tooLargeError{field: "body", limit: limit}
	case errors.Is(err, io.EOF):
		return invalid("body", "must be a JSON object, got an empty body")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "is not valid JSON: "+err.Error())
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return invalid("body", "must be a JSON object")
		}
		return invalid(field, fmt.Sprintf("must be a %s", jsonKind(typeErr.Type.Kind().String())))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		quoted := strings.TrimPrefix(err.Error(), "json: unknown field ")
		name, uerr := strconv.Unquote(quoted)
		if uerr != nil {
			name = strings.Trim(quoted, `"`)
		}
		if name == "" {
			return invalid("body", `has a field named "", which is not a known field`)
		}
		return invalid(name, "is not a known field")
	}
	return invalid("body", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice", "array":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	case "bool":
		return "boolean"
	default:
		return "number"
	}
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
