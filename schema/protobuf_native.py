"""Protobuf messages with their descriptors as the definition: Pulsar's PROTOBUF_NATIVE.

The definition is Pulsar's ProtobufNativeSchemaData JSON: the message's .proto file and the
files it imports as a base64 FileDescriptorSet, the root message's full name and its file's
name; so a reader that has no generated class (AUTO_CONSUME, another language) can decode.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from .schema import Schema, SchemaInfo, SchemaSerializationError, SchemaType

__all__ = ["ProtobufNativeSchema", "decode_generic_protobuf"]


# Descriptors are typed loosely: protobuf's C (upb) and Python descriptor classes differ.
def _file_set(root: Any) -> descriptor_pb2.FileDescriptorSet:
    """``root`` and every file it imports, each once, imports first."""
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(file: Any) -> None:
        if file.name in files:
            return
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        files[file.name] = proto

    add(root)
    return descriptor_pb2.FileDescriptorSet(file=list(files.values()))


class ProtobufNativeSchema(Schema):
    """Values of a generated protobuf message class, in protobuf's binary encoding.

    >>> schema = ProtobufNativeSchema(my_pb2.Order)
    """

    def __init__(self, message_class: type[Message]) -> None:
        descriptor = message_class.DESCRIPTOR
        definition = {
            "fileDescriptorSet": base64.b64encode(
                _file_set(descriptor.file).SerializeToString()
            ).decode(),
            "rootMessageTypeName": descriptor.full_name,
            "rootFileDescriptorName": descriptor.file.name,
        }
        info = SchemaInfo(
            SchemaType.PROTOBUF_NATIVE, descriptor.full_name, json.dumps(definition).encode()
        )
        super().__init__(info, message_class)
        self._message_class = message_class

    def encode(self, value: Any) -> bytes:
        self._validate_object_type(value)
        return value.SerializeToString()

    def decode(self, data: bytes) -> Message:
        try:
            return self._message_class.FromString(data)
        except DecodeError as exc:
            raise SchemaSerializationError(f"cannot decode the message: {exc}") from None


def message_class_of(info: SchemaInfo) -> type[Message]:
    """The message class a PROTOBUF_NATIVE definition describes, built from its descriptors
    in a pool of its own (so it never clashes with classes the application imported)."""
    definition = info.definition()
    files = descriptor_pb2.FileDescriptorSet.FromString(
        base64.b64decode(definition["fileDescriptorSet"])
    )
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    descriptor = pool.FindMessageTypeByName(definition["rootMessageTypeName"])
    return message_factory.GetMessageClass(descriptor)


def decode_generic_protobuf(message_class: type[Message], data: bytes) -> dict[str, Any]:
    """A PROTOBUF_NATIVE payload as a dict keyed by the .proto's field names, every field
    present (an unset message field is None), enums by name, 64-bit ints as ints."""
    try:
        message = message_class.FromString(data)
    except DecodeError as exc:
        raise SchemaSerializationError(f"cannot decode the message: {exc}") from None
    return _as_dict(message)


def _as_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fields: list[Any] = list(message.DESCRIPTOR.fields)
    for field in fields:
        value = getattr(message, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _plain(value_field, v) for k, v in value.items()}
        elif _is_repeated(field):
            out[field.name] = [_plain(field, v) for v in value]
        elif field.message_type is not None and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _plain(field, value)
    return out


def _is_repeated(field: Any) -> bool:
    return bool(field.is_repeated)


def _is_map(field: Any) -> bool:
    return (
        _is_repeated(field)
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


def _plain(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        return _as_dict(value)
    if field.enum_type is not None:
        member = field.enum_type.values_by_number.get(value)
        return member.name if member is not None else value
    return value
