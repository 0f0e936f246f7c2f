#pragma once
// The C interface of libpgq_sentencepiece.so, the one place pgq calls SentencePiece from.
//
// Why a separate library, loaded at run time: Debian's libsentencepiece carries its own
// copy of protobuf-lite 3.14 and exports its symbols (1,296 of them also in libprotobuf
// 3.21, which the ONNX importer links), and resolves its own calls to them through the
// global symbol scope. Linked into pgq, SentencePiece would run protobuf 3.21's code on
// its 3.14 structures (it aborts at its first model). frontend/tokenizer.cc loads this
// library with RTLD_DEEPBIND, so that SentencePiece and its dependencies resolve their
// symbols among themselves first, and each side keeps its own protobuf.
//
// No memory crosses the interface: data leaves the library only through a sink callback
// that copies it, so whatever allocated something frees it (a deep-bound library may call
// another allocator than the program's, as under AddressSanitizer). Functions that can
// fail return 0 on success and otherwise send the error message to `error`.
#include <cstddef>

extern "C" {

typedef void (*PgqSpmSink)(void* context, const void* data, size_t size);

// Trains a model on the non-empty lines of `text` with SentencePiece's options as
// key/value pairs, and sends the serialized model to `model`.
typedef int (*PgqSpmTrain)(const char* const* keys, const char* const* values, size_t options, const char* text,
                           size_t text_size, PgqSpmSink model, void* model_context, PgqSpmSink error,
                           void* error_context);
// A processor for a serialized model, or null (after sending the error).
typedef void* (*PgqSpmLoad)(const char* model, size_t model_size, PgqSpmSink error, void* error_context);
typedef void (*PgqSpmFree)(void* processor);
typedef int (*PgqSpmPieceCount)(const void* processor);
// Piece `id`'s text to `piece`; returns its kind: 0 normal, 1 byte, 2 control, 3 unknown.
typedef int (*PgqSpmPiece)(const void* processor, int id, PgqSpmSink piece, void* piece_context);
// Encodes `text` line by line and sends each line's ids (int32) to `ids`. Thread-safe.
typedef int (*PgqSpmEncode)(const void* processor, const char* text, size_t text_size, PgqSpmSink ids,
                            void* ids_context, PgqSpmSink error, void* error_context);
// Decodes `ids` and sends the text to `text`.
typedef int (*PgqSpmDecode)(const void* processor, const int* ids, size_t count, PgqSpmSink text,
                            void* text_context, PgqSpmSink error, void* error_context);

}  // extern "C"
