"""A body that does not parse is answered in Go's words (encoding/json's and go-yaml's), not
Python's (`Expecting value at offset 9`, `"<unicode string>", line 1`)."""

from __future__ import annotations

import pytest

from ephemera.apiserver.body import DecodeError, decode_document


@pytest.mark.parametrize(("body", "message"), [
    (b'{"a": [1,}', "json parse error: invalid character '}' looking for beginning of value"),
    (b'{"a" 1}', "json parse error: invalid character '1' after object key"),
    (b'{"a": 1 "b": 2}',
     "json parse error: invalid character '\"' after object key:value pair"),
    (b"[1 2", "json parse error: invalid character '2' after array element"),
    (b'{"a": 1}}', "json parse error: invalid character '}' after top-level value"),
    (b'{"a": "x', "json parse error: unexpected end of JSON input"),
    (b'{"a": "b\\q"}', "json parse error: invalid character 'q' in string escape code"),
    (b"a: b: c", "error converting YAML to JSON: yaml: line 1: mapping values are not "
                 "allowed in this context"),
    (b"a:\n\t- b", "error converting YAML to JSON: yaml: line 2: found character that "
                   "cannot start any token"),
    (b'x: "open', "error converting YAML to JSON: yaml: line 1: found unexpected end of "
                  "stream"),
])
def test_parse_errors_read_as_go_s(body: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as err:
        decode_document(body)
    assert str(err.value) == message
    assert "unicode string" not in str(err.value) and "offset" not in str(err.value)


def test_yaml_map_keys_become_json_keys_and_a_null_key_is_refused() -> None:
    """As sigs.k8s.io/yaml converts YAML to JSON: number keys written out, a null key (the
    fuzz suite's `?`) a decode error, never a 500."""
    assert decode_document(b"a: 1\n2: x\n1.5: y\n") == {"a": 1, "2": "x", "1.5": "y"}
    with pytest.raises(DecodeError) as err:
        decode_document(b"?")
    assert str(err.value) == ("error converting YAML to JSON: unsupported map key of type: "
                              "%!s(<nil>), key: <nil>, value: <nil>")
    # equal as Python keys, two keys in JSON; float keys as float32s are; a merge key merges
    assert decode_document(b"true: a\n1: b\n1.0e+6: c\n") == {"true": "a", "1": "b", "1e+06": "c"}
    assert decode_document(b".inf: a\n-.inf: b\n.nan: c\n3.14159265358979: d\n") == {
        ".inf": "a", "-.inf": "b", ".nan": "c", "3.1415927": "d"}
    assert decode_document(b"base: &b {x: 1}\nm: {<<: *b, y: 2}\n")["m"] == {"x": 1, "y": 2}
    with pytest.raises(DecodeError) as err:  # the value as Go's %+#v quotes it
        decode_document(b'~: "tab\\there \\x01"\n')
    assert str(err.value).endswith('key: <nil>, value: "tab\\there \\x01"')
    with pytest.raises(DecodeError) as err:
        decode_document(b"~: {a: [1, ~]}\n")
    assert str(err.value).endswith('value: map[interface {}]interface {}{"a":[]interface {}'
                                   '{1, interface {}(nil)}}')
    with pytest.raises(DecodeError) as err:  # go-yaml refuses a collection as a key first
        decode_document(b"? [a, 1]\n: b\n")
    assert str(err.value) == ('error converting YAML to JSON: yaml: invalid map key: '
                              '[]interface {}{"a", 1}')
