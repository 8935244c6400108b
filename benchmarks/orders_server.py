"""The child of the code-mode benchmark: a stdio MCP server whose one tool looks up an order, as a shop's API would
answer (its lines, its address, its refund), and names the next order to look at: thirty lookups that depend on each
other, so no model can ask for them all at once."""

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("shop")
COUNT = 30


class Line(BaseModel):
    sku: str
    title: str
    quantity: int
    unit_price: float


class Order(BaseModel):
    id: str
    customer: str
    shipping_address: str
    lines: list[Line]
    status: str
    refund: float
    next: str | None


def order(number: int) -> Order:
    """Order `number` of the chain: made from its number alone, the same at every call."""
    lines = [
        Line(sku=f"SKU-{number:03d}-{k}", title=f"Item {k} of order {number}", quantity=1 + k, unit_price=9.5 + k)
        for k in range(4)
    ]
    return Order(
        id=f"A{number}",
        customer=f"Customer {number}",
        shipping_address=f"{number} Long Street, Flat {number % 7}, Springfield, 12345",
        lines=lines,
        status="refunded" if number % 3 else "partially refunded",
        refund=round(1.25 * number + 0.5, 2),
        next=f"A{number + 1}" if number < COUNT else None,
    )


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_order(id: str) -> Order:
    """Look up an order by its id (A1, A2, ...): its customer, lines, status, refund and the next order to check."""
    return order(int(id.removeprefix("A")))


if __name__ == "__main__":
    server.run()
