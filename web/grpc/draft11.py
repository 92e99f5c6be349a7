"""The A2A 1.1 draft's protobuf messages (dev-1.1 of a2aproject/A2A, "add
generation field to Task").

The draft's `a2a.proto` is 1.0's with five fields more, so its messages are
built here, once, from the descriptor of the a2a-sdk's compiled 1.0 proto
(`a2a.types.a2a_pb2`) with those fields added: `generation` on Task and on
both update events, `current_generation` on GetTaskRequest (the long-poll)
and `if_generation_match` on SendMessageConfiguration. They live in a
descriptor pool of their own (the default pool already holds 1.0's messages
under the same names), beside copies of the files the proto imports.

The draft's messages decode every request, 1.0's included: a 1.0 request is
the same bytes, and reads the same. A 1.1 caller is answered with them; a 1.0
caller with the SDK's own, so its bytes stay what they were.
"""

from __future__ import annotations

from typing import Final

from a2a.types import a2a_pb2
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.message_factory import GetMessageClass

_FIELD: Final = descriptor_pb2.FieldDescriptorProto
# Each message the draft extends: its new int64 field, number, and whether it
# has presence (proto3 `optional`: unset is told apart from 0).
ADDED: Final = {
    "Task": ("generation", 7, False),
    "TaskStatusUpdateEvent": ("generation", 5, False),
    "TaskArtifactUpdateEvent": ("generation", 7, False),
    "GetTaskRequest": ("current_generation", 4, True),
    "SendMessageConfiguration": ("if_generation_match", 5, True),
}


def _with_imports(file: FileDescriptor) -> list[descriptor_pb2.FileDescriptorProto]:
    """`file` and every file it imports, as protos, each after its imports."""
    found: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def visit(each: FileDescriptor) -> None:
        for imported in each.dependencies:
            visit(imported)
        if each.name not in found:
            proto = descriptor_pb2.FileDescriptorProto()
            each.CopyToProto(proto)
            found[each.name] = proto

    visit(file)
    return list(found.values())


def _extended(proto: descriptor_pb2.FileDescriptorProto) -> None:
    for message in proto.message_type:
        if message.name not in ADDED:
            continue
        name, number, present = ADDED[message.name]
        head, *rest = name.split("_")
        field = message.field.add(
            name=name,
            number=number,
            label=_FIELD.LABEL_OPTIONAL,
            type=_FIELD.TYPE_INT64,
            json_name=head + "".join(word.title() for word in rest),
        )
        if present:
            # proto3 `optional` is a synthetic oneof, declared after the real ones.
            field.proto3_optional = True
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_{name}")


def _pool() -> descriptor_pool.DescriptorPool:
    *imports, a2a = _with_imports(a2a_pb2.DESCRIPTOR)
    _extended(a2a)
    pool = descriptor_pool.DescriptorPool()
    for proto in (*imports, a2a):
        pool.Add(proto)
    return pool


POOL: Final = _pool()
SERVICE: Final = POOL.FindServiceByName(a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].full_name)


def message_class(full_name: str) -> type[ProtoMessage]:
    """The draft's message of that full name ("lf.a2a.v1.Task")."""
    kind: type[ProtoMessage] = GetMessageClass(POOL.FindMessageTypeByName(full_name))
    return kind
