package sis

import (
	"encoding/json"
	"strconv"
)

// The JSON of events, state documents and detail rows is written here
// without encoding/json's reflection: every changed flight costs a msg
// event, a schd event and its state document, and reflection over the
// generic shape (maps of any) was a large part of a message's CPU time.
// The output is byte for byte what encoding/json writes for the same
// values (TestJSONMatchesEncodingJSON): keys of maps in order, strings
// escaped alike, nil maps and slices as null.

// appendJSON appends v in the generic shape msgx uses for message bodies
// (see Item): strings, maps of any, slices of any. Any other value is
// written by encoding/json.
func appendJSON(out []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return appendJSONString(out, v), nil
	case map[string]any:
		return appendJSONObject(out, v)
	case []any:
		if v == nil {
			return append(out, "null"...), nil
		}
		return appendJSONArray(out, v)
	case []Item:
		if v == nil {
			return append(out, "null"...), nil
		}
		out = append(out, '[')
		for i, it := range v {
			if i > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = appendJSONObject(out, it); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case map[string]string:
		if v == nil {
			return append(out, "null"...), nil
		}
		out = append(out, '{')
		for i, k := range sortedKeys(v) {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, k)
			out = append(out, ':')
			out = appendJSONString(out, v[k])
		}
		return append(out, '}'), nil
	case nil:
		return append(out, "null"...), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(out, b...), nil
}

func appendJSONObject(out []byte, m map[string]any) ([]byte, error) {
	if m == nil {
		return append(out, "null"...), nil
	}
	out = append(out, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, k)
		out = append(out, ':')
		var err error
		if out, err = appendJSON(out, m[k]); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

func appendJSONArray(out []byte, a []any) ([]byte, error) {
	out = append(out, '[')
	for i, v := range a {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = appendJSON(out, v); err != nil {
			return nil, err
		}
	}
	return append(out, ']'), nil
}

// marshalJSON is appendJSON into a new slice.
func marshalJSON(v any) ([]byte, error) { return appendJSON(make([]byte, 0, 256), v) }

// appendMsgEvent appends e as encoding/json writes a MsgEvent.
func appendMsgEvent(out []byte, e *MsgEvent) ([]byte, error) {
	out = append(out, `{"schema":`...)
	out = appendJSONString(out, e.Schema)
	out = append(out, `,"msgId":`...)
	out = strconv.AppendInt(out, e.MsgID, 10)
	out = append(out, `,"identity":`...)
	out = appendJSONString(out, e.Identity)
	out = append(out, `,"kind":`...)
	out = appendJSONString(out, e.Kind)
	out = append(out, `,"meta":{"SNDR":`...)
	out = appendJSONString(out, e.Meta.SNDR)
	out = append(out, `,"SEQN":`...)
	out = strconv.AppendInt(out, e.Meta.SEQN, 10)
	out = append(out, `,"DTTM":`...)
	out = appendJSONString(out, e.Meta.DTTM)
	out = append(out, `,"TYPE":`...)
	out = appendJSONString(out, e.Meta.TYPE)
	out = append(out, `,"STYP":`...)
	out = appendJSONString(out, e.Meta.STYP)
	out = append(out, `,"sent":`...)
	out = appendJSONString(out, e.Meta.Sent)
	out = append(out, `},"flid":`...)
	out = appendJSONString(out, e.FLID)
	out = append(out, `,"operationDay":`...)
	out = appendJSONString(out, e.OperationDay)
	out = append(out, `,"status":`...)
	out = appendJSONString(out, e.Status)
	out = append(out, `,"stateVersion":`...)
	out = strconv.AppendInt(out, e.StateVersion, 10)
	out = append(out, `,"body":`...)
	out, err := appendJSONObject(out, e.Body)
	if err != nil {
		return nil, err
	}
	return append(out, '}'), nil
}

// appendSchdHead appends h as encoding/json writes a SchdHead.
func appendSchdHead(out []byte, h *SchdHead) []byte {
	out = append(out, `{"schema":`...)
	out = appendJSONString(out, h.Schema)
	out = append(out, `,"flid":`...)
	out = appendJSONString(out, h.FLID)
	out = append(out, `,"operationDay":`...)
	out = appendJSONString(out, h.OperationDay)
	out = append(out, `,"status":`...)
	out = appendJSONString(out, h.Status)
	out = append(out, `,"stateVersion":`...)
	out = strconv.AppendInt(out, h.StateVersion, 10)
	out = append(out, `,"lastMsgId":`...)
	out = strconv.AppendInt(out, h.LastMsgID, 10)
	return append(out, '}')
}
