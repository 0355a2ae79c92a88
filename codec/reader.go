package codec

// Reader is a cursor over one encoded document, the same for both formats:
// *JSONReader and *MsgpackReader implement it, so a decoder written against
// it (an event dialect, a request parser) is written once for JSON and
// msgpack alike.
//
// The cursor stands at a value. Scalar readers (Str, Int64, Uint64, Float64,
// Nil, Value) and Skip consume that value; EnterMap and EnterArray open a
// container, then NextKey steps to each entry of a map and reads its key, and
// Next to each element of an array, leaving the container after the last.
// The integer array readers (Int32s, Uint64s) take a whole array with their
// fast paths.
//
// Results are three-way: a nil error means the value was read; ok=false from
// Next or NextKey with a nil error means the container ended; an error means
// the input is malformed (ErrSyntax, ErrTruncated, nesting over MaxDepth:
// ErrTooLarge) or the value is not what was asked for (ErrWrongType,
// ErrOutOfRange, an array longer than max: ErrTooLarge, ErrBadHash). Such a
// type or range error consumes nothing: the cursor stays at the value, so the
// caller can Skip it and let a syntax error further on win. After a syntax
// error the cursor is where the input went wrong (Offset). Errors are, or
// wrap (Cause), the package's sentinels and never allocate.
//
// Performance: each method is a call through the interface, which the
// compiler neither inlines nor (for a type parameter, which Go compiles to
// one body per GC shape with a dictionary) devirtualises; the loops over many
// elements (Int32s, Uint64s, Skip) are therefore inside the readers. A hot
// decoder of both formats takes *EitherReader instead, whose calls are direct
// and whose msgpack common cases take no further call.
//
// Byte slices returned (keys, strings, raw values) are sub-slices of the input
// and valid as long as it is, or, for JSON strings with escapes, views of the
// reader's arena, valid until the arena's owner reuses it. Valid input costs
// no allocation (TestReaderZeroAllocs) beyond growing the caller's dst.
//
// A Reader is not safe for concurrent use; it holds one position and a stack
// of the containers entered (at most MaxDepth).
type Reader interface {
	// Kind reports what the value at the cursor is, without consuming it:
	// KindInvalid at the end of the input or where no value can start.
	Kind() Kind
	// EnterMap opens the map at the cursor and returns its entry count, or
	// -1 where the encoding does not state it up front (JSON).
	EnterMap() (n int, err error)
	// EnterArray opens the array at the cursor, of at most max elements, and
	// returns its count, or -1 for JSON. A longer array is ErrTooLarge: in
	// msgpack here, from its stated count; in JSON from Next, at element
	// max+1, which is left unread.
	EnterArray(max int) (n int, err error)
	// Next steps to the next element of the innermost open container, an
	// array: ok=false with a nil error after its last, when the array is left
	// and the cursor is after it.
	Next() (ok bool, err error)
	// NextKey steps to the next entry of the innermost open container, a map,
	// reads its key and moves to its value: ok=false with a nil error after
	// the last entry, when the map is left. ok=false with an error means the
	// map is malformed where an entry or its end should be (JSON: a bad
	// separator after the previous value); ok=true with an error, that the
	// entry's key is (not a string: ErrWrongType).
	NextKey() (key []byte, ok bool, err error)
	// Nil consumes a nil (JSON null) at the cursor and reports whether there
	// was one; err is set only for a malformed literal.
	Nil() (bool, error)
	// Str reads a string.
	Str() ([]byte, error)
	// Int64 reads an integer that fits int64; a fraction or exponent is
	// ErrWrongType, a larger integer ErrOutOfRange.
	Int64() (int64, error)
	// Uint64 reads a 64-bit value in mode's forms (Mode), exactly.
	Uint64(mode Mode) (uint64, error)
	// Float64 reads a floating-point value (msgpack float32/float64, a JSON
	// number with a fraction or exponent); an integer is ErrWrongType.
	Float64() (float64, error)
	// Int32s reads an array of at most max integers in math.MinInt32..hi (hi
	// is math.MaxInt32 or math.MaxUint32) and appends them to dst as their
	// low 32 bits. On error out is dst and bad is the index of the element at
	// fault, or -1 when the fault is not in one element (the array itself, its
	// length, a separator).
	Int32s(dst []int32, max int, hi int64) (out []int32, bad int, err error)
	// Uint64s reads an array of at most max values in mode's forms and
	// appends them to dst; errors are Int32s'.
	Uint64s(dst []uint64, max int, mode Mode) (out []uint64, bad int, err error)
	// Value reads any value: scalars decoded, strings and bins as views,
	// arrays and maps validated and returned raw.
	Value() (Value, error)
	// Skip consumes the value at the cursor, validating it.
	Skip() error
	// Mark records the cursor; Restore returns to a mark taken in the same
	// container or an enclosing one, with the containers then open.
	Mark() Mark
	Restore(Mark)
	// Offset is the cursor's position in the input, in bytes.
	Offset() int
	// End reports whether nothing but (JSON) whitespace is left.
	End() bool
}

// Kind classifies a value.
type Kind uint8

const (
	KindInvalid Kind = iota // no value: end of input or a byte no value starts with
	KindNil
	KindBool
	KindInt   // an integer of any size (Value.Num)
	KindFloat // a fraction or exponent (JSON), float32/float64 (msgpack)
	KindStr
	KindBin   // msgpack only
	KindArray // Value.Bytes: the raw encoding
	KindMap   // Value.Bytes: the raw encoding
	KindExt   // a msgpack extension type
)

// Value is a value Reader.Value read.
type Value struct {
	Kind  Kind
	Bool  bool   // KindBool
	Num   Number // KindInt: sign and magnitude (Big beyond 64 bits, JSON only); KindFloat: Num.Float
	Bytes []byte // KindStr, KindBin: the content; KindArray, KindMap: the encoding
}

// Mark is a saved cursor (Reader.Mark).
type Mark struct {
	off, depth int
	left       uint32 // MsgpackReader: the innermost container's count
}

// isValueErr reports whether err is a type or range error, after which a
// reader leaves the cursor at the value.
func isValueErr(err error) bool {
	return err == ErrWrongType || err == ErrOutOfRange || err == ErrTooLarge || err == ErrBadHash
}
